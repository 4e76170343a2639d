package batch

import (
	"context"
	"crypto/tls"
	"io"
	"net/http/httptest"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/coresim"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
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

	c := NewCommand("resolve")
	cf := c.AddCoreFlags()
	assert.NilError(t, c.Parse([]string{"--db", "x", "--core", srv.URL, "--core-ca", coreCA.WriteCA(t, dir, "core-ca"), "--core-cert", cert, "--core-key", key}, io.Discard))
	client, err := cf.Client()
	assert.NilError(t, err)
	guid := testkit.GUID()
	h, frame := transferFrame(t, guid, "tls", 1)
	r, err := wire.ParseRequest(frame)
	assert.NilError(t, err)
	found, err := client.Lookup(context.Background(), r.Tx, h.GUID, r.Body)
	assert.NilError(t, err)
	assert.Assert(t, !found.Posted)

	c = NewCommand("reprocess")
	cf = c.AddCoreFlags()
	assert.NilError(t, c.Parse([]string{"--db", "x", "--core", "http://127.0.0.1:1", "--core-cert", cert, "--core-key", key}, io.Discard))
	_, err = cf.Client()
	assert.ErrorContains(t, err, "need an https://")
}
