package batchcmd

import (
	"context"
	"crypto/tls"
	"io"
	"net/http/httptest"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/coresim"
	"lhrelay/internal/testkit"
)

// resolve and reprocess reach an mTLS core with the relay's flags.
func TestCoreFlagsMTLS(t *testing.T) {
	dir := t.TempDir()
	coreCA, clientCA := testkit.NewCA(t, "core CA"), testkit.NewCA(t, "batch CA")
	srv := httptest.NewUnstartedServer(coresim.New(coresim.Config{}))
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{coreCA.Server(t, "core").TLS},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCA.Pool(),
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cert, key := clientCA.Client(t, "resolve").WriteFiles(t, dir, "batch")

	c := New("resolve")
	cf := c.AddCoreFlags()
	assert.NilError(t, c.Parse([]string{"--db", "x", "--core", srv.URL, "--core-ca", coreCA.WriteCA(t, dir, "core-ca"), "--core-cert", cert, "--core-key", key}, io.Discard))
	client, err := cf.Client()
	assert.NilError(t, err)
	tx := testkit.TransferTx()
	found, err := client.Lookup(context.Background(), tx, "0123456789abcdef0123456789abcdef", tx.NewRequest())
	assert.NilError(t, err)
	assert.Assert(t, !found.Posted)

	c = New("reprocess")
	cf = c.AddCoreFlags()
	assert.NilError(t, c.Parse([]string{"--db", "x", "--core", "http://127.0.0.1:1", "--core-cert", cert, "--core-key", key}, io.Discard))
	_, err = cf.Client()
	assert.ErrorContains(t, err, "need an https://")
}
