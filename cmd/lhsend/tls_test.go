package main

import (
	"crypto/tls"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/testkit"
)

// TestTLS: --tls-ca, --tls-cert and --tls-key speak TLS to a relay that
// serves it and requires a client certificate, for one request and for a
// load run; a relay that refuses the certificate is a one-line error.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	relayCA, channelCA := testkit.NewCA(t, "relay CA"), testkit.NewCA(t, "channel CA")
	r := testkit.StartTLS(t, nil, &tls.Config{
		Certificates: []tls.Certificate{relayCA.Server(t, "relay").TLS},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    channelCA.Pool(),
		MinVersion:   tls.VersionTLS12,
	})
	ca := relayCA.WriteCA(t, dir, "relay-ca")
	cert, key := channelCA.Client(t, "atm-0001").WriteFiles(t, dir, "atm")

	res := runCmd(t, "", "--addr", r.Addr, "--tls-ca", ca, "--tls-cert", cert, "--tls-key", key, "--guid", guid)
	assert.Equal(t, res.code, 0, res.stderr)
	assert.Check(t, is.Contains(res.stdout, "0000"))

	res = runCmd(t, "", "--addr", r.Addr, "--tls-ca", ca, "--tls-cert", cert, "--tls-key", key, "--count", "6", "--concurrency", "3")
	assert.Equal(t, res.code, 0, res.stderr)
	assert.Equal(t, len(r.Frames()), 7)

	other := testkit.NewCA(t, "other CA")
	wrongCert, wrongKey := other.Client(t, "intruder").WriteFiles(t, dir, "intruder")
	res = runCmd(t, "", "--addr", r.Addr, "--tls-ca", ca, "--tls-cert", wrongCert, "--tls-key", wrongKey, "--guid", guid, "--answer-timeout", "5")
	assert.Equal(t, res.code, exitFailed, res.stdout)
	assert.Equal(t, len(r.Frames()), 7, "nothing more reached the relay")

	res = runCmd(t, "", "--addr", r.Addr, "--tls-cert", cert)
	oneLineError(t, res, exitUsage, "--tls-cert and --tls-key go together")
	res = runCmd(t, "", "--addr", r.Addr, "--tls-ca", key)
	oneLineError(t, res, exitUsage, "--tls-ca")
}
