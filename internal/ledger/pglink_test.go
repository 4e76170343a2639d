package ledger

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/pgtest"
	"lhrelay/internal/testkit"
)

// withLookup resolves the URL's host names through names (tests): a
// name other than localhost then reaches the test server on 127.0.0.1.
func withLookup(names map[string]string) Option {
	return func(c *config) {
		c.lookup = func(ctx context.Context, host string) ([]string, error) {
			if a, ok := names[host]; ok {
				return []string{a}, nil
			}
			return net.DefaultResolver.LookupHost(ctx, host)
		}
	}
}

// TestLedgerLinkTLS (SPEC 6a): a URL that reaches a host other than the
// loopback and states no sslmode verifies the server's certificate and
// name; an explicit sslmode is honoured and reported; the loopback keeps
// libpq's default. Against the throwaway server with TLS on, then off.
func TestLedgerLinkTLS(t *testing.T) {
	ca, other := testkit.NewCA(t, "ledger CA"), testkit.NewCA(t, "other CA")
	dir := t.TempDir()
	caFile, otherFile := ca.WriteCA(t, dir, "ca"), other.WriteCA(t, dir, "other")
	leaf := ca.ServerFor(t, "ledger.test", "ledger.test")
	pgtest.SetSSL(t, leaf.CertPEM, leaf.KeyPEM)

	loop := pgtest.URL(t) // postgres://postgres@127.0.0.1:PORT/postgres?search_path=…
	at := func(host, params string) string {
		return strings.Replace(loop, "@127.0.0.1:", "@"+host+":", 1) + params
	}
	lookup := withLookup(map[string]string{"ledger.test": "127.0.0.1", "wrong.test": "127.0.0.1"})
	open := func(u string) (*Ledger, error) {
		l, err := Open(u, lookup)
		if err == nil {
			t.Cleanup(func() { l.Close() })
		}
		return l, err
	}
	oneLine := func(err error, want string) {
		t.Helper()
		assert.ErrorContains(t, err, want)
		assert.Check(t, !strings.Contains(err.Error(), "\n"), "more than one line: %v", err)
	}

	// Right CA and name: verify-full without asking.
	l, err := open(at("ledger.test", "&sslrootcert="+caFile))
	assert.NilError(t, err)
	assert.Equal(t, l.Link(), LinkVerified)
	assert.Assert(t, strings.Contains(l.Path(), "sslmode=verify-full"), l.Path())

	// Wrong CA, wrong name: refused at open, in one line.
	_, err = open(at("ledger.test", "&sslrootcert="+otherFile))
	oneLine(err, "certificate signed by unknown authority")
	_, err = open(at("wrong.test", "&sslrootcert="+caFile))
	oneLine(err, "certificate is valid for ledger.test, not wrong.test")

	// Stated: honoured, and reported as unverified.
	l, err = open(at("wrong.test", "&sslmode=require"))
	assert.NilError(t, err)
	assert.Equal(t, l.Link(), LinkUnverified)

	// The loopback keeps libpq's default (prefer: TLS when offered,
	// unverified): nobody sits on that link.
	l, err = open(loop)
	assert.NilError(t, err)
	assert.Equal(t, l.Link(), LinkLoopback)

	// The server without TLS: refused unless plaintext is stated.
	pgtest.SetSSL(t, nil, nil)
	_, err = open(at("ledger.test", "&sslrootcert="+caFile))
	oneLine(err, "server refused TLS connection")
	l, err = open(at("ledger.test", "&sslmode=disable"))
	assert.NilError(t, err)
	assert.Equal(t, l.Link(), LinkUnverified)
	l, err = open(loop)
	assert.NilError(t, err)
	assert.Equal(t, l.Link(), LinkLoopback)
}

// TestPassfileReadableByOthers: a password that pgx would take from a
// password file readable by group or others is refused, naming the file
// and never the password; 0600 is taken.
func TestPassfileReadableByOthers(t *testing.T) {
	pass := filepath.Join(t.TempDir(), "pgpass")
	testkit.WriteFile(t, pass, []byte("*:*:*:*:secret\n"))
	assert.NilError(t, os.Chmod(pass, 0o644))
	t.Setenv("PGPASSFILE", pass)
	_, err := OpenExisting("postgres://lhrelay@127.0.0.1:1/ledger?connect_timeout=1")
	assert.ErrorContains(t, err, "PGPASSFILE "+pass+" gives the ledger's password and is readable by group or others")
	assert.Check(t, !strings.Contains(err.Error(), "secret"), err.Error())

	assert.NilError(t, os.Chmod(pass, 0o600))
	_, err = OpenExisting("postgres://lhrelay@127.0.0.1:1/ledger?connect_timeout=1")
	assert.Assert(t, err != nil) // nothing listens there
	assert.Check(t, !strings.Contains(err.Error(), "readable"), err.Error())
	assert.Check(t, !strings.Contains(err.Error(), "secret"), err.Error())
}

// TestPassfileNotReadIsNotRefused: a password file readable by others
// that gives the connection nothing is no reason to refuse a start: the
// URL or PGPASSWORD gives the password, or no entry matches (a file that
// serves other databases, a login by certificate). The ledger opens, on
// the real server. ~/.pgpass and the URL's passfile follow the same rule
// as PGPASSFILE.
func TestPassfileNotReadIsNotRefused(t *testing.T) {
	db := pgtest.URL(t) // postgres://postgres@127.0.0.1:PORT/postgres?…, trust authentication
	withPassword := strings.Replace(db, "postgres@", "postgres:pw@", 1)
	dir := t.TempDir()
	file := func(name string, mode os.FileMode, entry string) string {
		path := filepath.Join(dir, name)
		testkit.WriteFile(t, path, []byte(entry+"\n"))
		assert.NilError(t, os.Chmod(path, mode))
		return path
	}
	matching := file("matching", 0o644, "*:*:*:*:secret")
	other := file("other", 0o644, "db9.bank.internal:5432:ledger:lhrelay:secret")

	t.Run("the URL gives the password", func(t *testing.T) {
		t.Setenv("PGPASSFILE", matching)
		openLedger(t, withPassword)
	})
	t.Run("PGPASSWORD gives the password", func(t *testing.T) {
		t.Setenv("PGPASSFILE", matching)
		t.Setenv("PGPASSWORD", "pw")
		openLedger(t, db)
	})
	t.Run("no entry for the connection", func(t *testing.T) {
		t.Setenv("PGPASSFILE", other)
		openLedger(t, db)
	})
	t.Run("the URL's passfile", func(t *testing.T) {
		t.Setenv("PGPASSFILE", "")
		openLedger(t, db+"&passfile="+url.QueryEscape(other))
		_, err := Open(db + "&passfile=" + url.QueryEscape(matching))
		assert.ErrorContains(t, err, "passfile "+matching+" gives the ledger's password")
	})
	t.Run("~/.pgpass", func(t *testing.T) {
		home := t.TempDir()
		t.Setenv("HOME", home)
		t.Setenv("PGPASSFILE", "")
		pgpass := filepath.Join(home, ".pgpass")
		testkit.WriteFile(t, pgpass, []byte("*:*:*:*:secret\n"))
		assert.NilError(t, os.Chmod(pgpass, 0o640))
		openLedger(t, withPassword)
		_, err := Open(db)
		assert.ErrorContains(t, err, "password file "+pgpass+" gives the ledger's password")
		assert.Check(t, !strings.Contains(err.Error(), "secret"), err.Error())
	})
}
