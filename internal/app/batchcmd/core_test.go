package batchcmd

import (
	"context"
	"crypto/tls"
	"io"
	"net/http/httptest"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/testutil"
)

// resolve and reprocess reach an mTLS core with the relay's flags.
func TestCoreFlagsMTLS(t *testing.T) {
	dir := t.TempDir()
	coreCA, clientCA := testutil.NewCA(t, "core CA"), testutil.NewCA(t, "batch CA")
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
	tx := lookedUp(t)
	found, err := client.Lookup(context.Background(), tx, "0123456789abcdef0123456789abcdef", tx.NewRequest())
	assert.NilError(t, err)
	assert.Assert(t, !found.Posted)

	c = New("reprocess")
	cf = c.AddCoreFlags()
	assert.NilError(t, c.Parse([]string{"--db", "x", "--core", "http://127.0.0.1:1", "--core-cert", cert, "--core-key", key}, io.Discard))
	_, err = cf.Client()
	assert.ErrorContains(t, err, "need an https://")
}

// lookedUp is a registered transaction settled by a lookup.
func lookedUp(t *testing.T) *generated.Transaction {
	for _, tx := range generated.Transactions() {
		if tx.Settle == generated.SettleByLookup {
			return tx
		}
	}
	t.Fatal("no registered transaction is settled by a lookup")
	return nil
}
