package ledger

import (
	"context"
	"net"
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

// TestPassfileReadableByOthers: a password file readable by group or
// others is refused, naming it (libpq's rule); 0600 is taken.
func TestPassfileReadableByOthers(t *testing.T) {
	pass := filepath.Join(t.TempDir(), "pgpass")
	testkit.WriteFile(t, pass, []byte("*:*:*:*:secret\n"))
	assert.NilError(t, os.Chmod(pass, 0o644))
	t.Setenv("PGPASSFILE", pass)
	_, err := OpenExisting("postgres://lhrelay@127.0.0.1:1/ledger?connect_timeout=1")
	assert.ErrorContains(t, err, "PGPASSFILE "+pass+" is readable by group or others")

	assert.NilError(t, os.Chmod(pass, 0o600))
	_, err = OpenExisting("postgres://lhrelay@127.0.0.1:1/ledger?connect_timeout=1")
	assert.Assert(t, err != nil) // nothing listens there
	assert.Check(t, !strings.Contains(err.Error(), "readable"), err.Error())
	assert.Check(t, !strings.Contains(err.Error(), "secret"), err.Error())
}
