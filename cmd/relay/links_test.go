package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

func TestLinkArgsErrors(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t, "CA")
	cert, key := ca.Server(t, "relay").WriteFiles(t, dir, "relay")
	junk := filepath.Join(dir, "junk")
	testkit.WriteFile(t, junk, []byte("junk"))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--allow", "10.1.2.3/8"}, "--allow"},
		{[]string{"--allow", "nonsense"}, "--allow"},
		{[]string{"--allow", ""}, "--allow is empty: list networks (CIDR[,CIDR…]) or write any"},
		{[]string{"--allow", " "}, "--allow is empty"},
		{[]string{"--tls-cert", cert, "--tls-key", key, "--tls-client-org", "CN=atm:081"}, "--tls-client-org needs --tls-client-ca"},
		{[]string{"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", cert, "--tls-client-org", "CN=atm"}, "--tls-client-org \"CN=atm\": want"},
		{[]string{"--breaker-failures", "-1"}, "--breaker-failures"},
		{[]string{"--breaker-cooldown", "0"}, "--breaker-cooldown"},
		{[]string{"--breaker-window", "0"}, "--breaker-window"},
		{[]string{"--breaker-min-calls", "0"}, "--breaker-min-calls"},
		{[]string{"--breaker-rate", "1.5"}, "--breaker-rate"},
		{[]string{"--breaker-rate", "0"}, "--breaker-rate"},
		{[]string{"--max-inflight", "-1"}, "--max-inflight"},
		{[]string{"--admit-wait", "0"}, "admit-wait"},
		{[]string{"--core-ca", cert}, "need an https://"},
		{[]string{"--core", "https://127.0.0.1:1", "--core-ca", junk}, "--core-ca"},
		{[]string{"--core", "https://127.0.0.1:1", "--core-cert", cert}, "go together"},
		{[]string{"--tls-cert", cert}, "go together"},
		{[]string{"--tls-cert", cert, "--tls-key", junk}, "--tls-cert"},
		{[]string{"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", junk}, "--tls-client-ca"},
		{[]string{"--tls-cert", filepath.Join(dir, "missing"), "--tls-key", key}, "no such file"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append([]string{"--db", filepath.Join(t.TempDir(), "relay.db")}, tc.args...), &stdout, &stderr)
			assert.Equal(t, code, 2)
			assert.Assert(t, strings.HasPrefix(stderr.String(), "relay: "), stderr.String())
			assert.Assert(t, strings.Contains(stderr.String(), tc.want), stderr.String())
			assert.Equal(t, strings.Count(stderr.String(), "\n"), 1, "one line")
		})
	}
}

// TestSIGHUPReloadsTLSFiles: a new certificate is used by the next
// connection after SIGHUP, an open connection goes on, and a bad file
// keeps the certificate in force.
func TestSIGHUPReloadsTLSFiles(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t, "relay CA")
	cert, key := ca.Server(t, "relay-v1").WriteFiles(t, dir, "relay")
	r := startRun(t, "--tls-cert", cert, "--tls-key", key)
	r.drain()
	defer r.stopAndWait(t)

	dial := func() *tls.Conn {
		t.Helper()
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", r.addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
		assert.NilError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	subject := func(c *tls.Conn) string { return c.ConnectionState().PeerCertificates[0].Subject.CommonName }
	hup := func(want string) {
		t.Helper()
		logged := r.stderr.When(want)
		assert.NilError(t, syscall.Kill(syscall.Getpid(), syscall.SIGHUP))
		select {
		case <-logged:
		case <-time.After(10 * time.Second):
			t.Fatalf("no %q line after SIGHUP; stderr:\n%s", want, r.stderr)
		}
	}
	old := dial()
	assert.Equal(t, subject(old), "relay-v1")

	ca.Server(t, "relay-v2").WriteFiles(t, dir, "relay")
	hup("TLS files reloaded")
	assert.Equal(t, subject(dial()), "relay-v2")
	// The connection opened before the reload is still served.
	frame := testkit.Transfer(t, "5160ab0000000000000000000000000a", map[string]string{"wdAcct": "11002003004005", "dpBank": "004", "dpAcct": "22003004005006", "memo": "after SIGHUP"})
	old.SetDeadline(time.Now().Add(10 * time.Second))
	_, err := old.Write(frame)
	assert.NilError(t, err)
	answer, err := wire.ReadFrame(old, nil)
	assert.NilError(t, err)
	assert.Equal(t, generated.RawHeader(answer).RspCode, string(generated.RspHTTP200))

	testkit.WriteFile(t, cert, []byte("not a certificate"))
	hup("TLS files not reloaded")
	assert.Equal(t, subject(dial()), "relay-v2")
}

// TestAllowEmptyVariable: LHRELAY_ALLOW set but empty is refused, naming
// the variable, instead of counting as unset (every address).
func TestAllowEmptyVariable(t *testing.T) {
	t.Setenv("LHRELAY_ALLOW", "")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"--db", filepath.Join(t.TempDir(), "relay.db")}, &stdout, &stderr)
	assert.Equal(t, code, 2)
	assert.Equal(t, stderr.String(), "relay: LHRELAY_ALLOW is set but empty: list networks (CIDR[,CIDR…]) or write any to accept every address\n")
}
