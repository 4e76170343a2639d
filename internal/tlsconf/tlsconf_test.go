package tlsconf_test

import (
	"crypto/tls"
	"path/filepath"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/testutil"
	"lhrelay/internal/tlsconf"
)

func TestCoreFiles(t *testing.T) {
	dir := t.TempDir()
	ca := testutil.NewCA(t, "core CA")
	caFile := ca.WriteCA(t, dir, "ca")
	cert, key := ca.Client(t, "relay").WriteFiles(t, dir, "relay")
	junk := filepath.Join(dir, "junk.pem")
	testutil.WriteFile(t, junk, []byte("junk"))

	cfg, err := tlsconf.CoreFiles{}.Config("http://core:8080")
	assert.NilError(t, err)
	assert.Assert(t, cfg == nil, "no TLS for http")

	cfg, err = tlsconf.CoreFiles{CA: caFile, Cert: cert, Key: key}.Config("https://core:8443")
	assert.NilError(t, err)
	assert.Assert(t, cfg.RootCAs != nil)
	assert.Equal(t, len(cfg.Certificates), 1)
	assert.Equal(t, cfg.MinVersion, uint16(tls.VersionTLS12))

	for _, tc := range []struct {
		files tlsconf.CoreFiles
		url   string
		want  string
	}{
		{tlsconf.CoreFiles{CA: caFile}, "http://core", "need an https://"},
		{tlsconf.CoreFiles{CA: junk}, "https://core", "--core-ca: " + junk + ": no PEM certificate"},
		{tlsconf.CoreFiles{CA: filepath.Join(dir, "missing")}, "https://core", "--core-ca: open"},
		{tlsconf.CoreFiles{Cert: cert}, "https://core", "go together"},
		{tlsconf.CoreFiles{Cert: cert, Key: junk}, "https://core", "--core-cert"},
	} {
		_, err := tc.files.Config(tc.url)
		assert.ErrorContains(t, err, tc.want)
	}
}

func TestServerReloadKeepsOldOnError(t *testing.T) {
	dir := t.TempDir()
	ca := testutil.NewCA(t, "relay CA")
	cert, key := ca.Server(t, "v1").WriteFiles(t, dir, "relay")
	files := tlsconf.ServerFiles{Cert: cert, Key: key, ClientCA: ca.WriteCA(t, dir, "clients")}
	s, err := tlsconf.NewServer(files)
	assert.NilError(t, err)
	assert.Assert(t, s.ClientAuth())
	current := func() string {
		cfg, err := s.Config().GetConfigForClient(nil)
		assert.NilError(t, err)
		assert.Equal(t, cfg.ClientAuth, tls.RequireAndVerifyClientCert)
		leaf := cfg.Certificates[0].Leaf
		return leaf.Subject.CommonName
	}
	assert.Equal(t, current(), "v1")
	ca.Server(t, "v2").WriteFiles(t, dir, "relay")
	assert.NilError(t, s.Reload())
	assert.Equal(t, current(), "v2")
	testutil.WriteFile(t, key, []byte("junk"))
	assert.ErrorContains(t, s.Reload(), "--tls-key")
	assert.Equal(t, current(), "v2")

	_, err = tlsconf.NewServer(tlsconf.ServerFiles{ClientCA: files.ClientCA})
	assert.ErrorContains(t, err, "go together")
}
