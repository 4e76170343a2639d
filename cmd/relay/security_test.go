package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/testkit"
)

// TestSIGHUPDuringStartup: a SIGHUP while the relay is still starting (its
// database slow to answer) does not kill it: it goes on, and here fails
// to open the ledger as it would have anyway, with one line and exit 2.
// Without the handler in place the test binary itself would die.
func TestSIGHUPDuringStartup(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // held, never answered: a database slow to answer
		}
	}()
	var stdout, stderr bytes.Buffer
	exit := make(chan int, 1)
	db := fmt.Sprintf("postgres://lhrelay@%s/ledger?sslmode=disable&connect_timeout=2", ln.Addr())
	go func() { exit <- run(context.Background(), []string{"--port", "0", "--db", db}, &stdout, &stderr) }()
	select {
	case c := <-accepted:
		defer c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the relay never connected to its database")
	}
	assert.NilError(t, syscall.Kill(syscall.Getpid(), syscall.SIGHUP))
	select {
	case code := <-exit:
		assert.Equal(t, code, 2, stderr.String())
		assert.Assert(t, strings.HasPrefix(stderr.String(), "relay: --db: "), stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatal("the relay did not give up on its database")
	}
}

// TestCertificateExpiry: a certificate that expires within two weeks is
// warned about at start, one that has expired is logged at error level
// when SIGHUP loads it, and each certificate's expiry time is a metric.
func TestCertificateExpiry(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t, "relay CA")
	soon := time.Now().Add(3 * 24 * time.Hour).Truncate(time.Second)
	cert, key := ca.ServerWith(t, "relay-soon", func(c *x509.Certificate) { c.NotAfter = soon }).WriteFiles(t, dir, "relay")
	r := startRun(t, "--tls-cert", cert, "--tls-key", key, "--metrics-addr", "127.0.0.1:0")
	assert.Assert(t, r.lines.Scan())
	metricsURL, _ := strings.CutPrefix(r.lines.Text(), "metrics listening on ")
	r.drain()
	defer r.stopAndWait(t)
	assert.Assert(t, strings.Contains(r.stderr.String(), "certificate expires soon"), r.stderr.String())
	assert.Assert(t, strings.Contains(r.stderr.String(), "subject=\"CN=relay-soon,O=lhrelay tests\""), r.stderr.String())

	_, body := httpGet(t, metricsURL+"/metrics")
	series := `lhrelay_tls_certificate_expiry_timestamp_seconds{flag="tls-cert",subject="CN=relay-soon,O=lhrelay tests"} `
	i := strings.Index(body, series)
	assert.Assert(t, i >= 0, "no %s in\n%s", series, body)
	line, _, _ := strings.Cut(body[i+len(series):], "\n")
	v, err := strconv.ParseFloat(line, 64)
	assert.NilError(t, err)
	assert.Equal(t, int64(v), soon.Unix())

	ca.ServerWith(t, "relay-expired", func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour)
	}).WriteFiles(t, dir, "relay")
	logged := r.stderr.When("certificate expired")
	assert.NilError(t, syscall.Kill(syscall.Getpid(), syscall.SIGHUP))
	select {
	case <-logged:
	case <-time.After(10 * time.Second):
		t.Fatalf("no expiry line after SIGHUP; stderr:\n%s", r.stderr)
	}
}
