package tlsconf_test

import (
	"crypto/tls"
	"path/filepath"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/testkit"
	"lhrelay/internal/tlsconf"
)

func TestCoreFiles(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t, "core CA")
	caFile := ca.WriteCA(t, dir, "ca")
	cert, key := ca.Client(t, "relay").WriteFiles(t, dir, "relay")
	junk := filepath.Join(dir, "junk.pem")
	testkit.WriteFile(t, junk, []byte("junk"))

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
	ca := testkit.NewCA(t, "relay CA")
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
	testkit.WriteFile(t, key, []byte("junk"))
	assert.ErrorContains(t, s.Reload(), "--tls-key")
	assert.Equal(t, current(), "v2")

	_, err = tlsconf.NewServer(tlsconf.ServerFiles{ClientCA: files.ClientCA})
	assert.ErrorContains(t, err, "go together")
}

// TestServerSpeaksAEADOnly: a channel offering only a CBC-SHA1 suite in
// TLS 1.2 fails the handshake; TLS 1.2 with AES-GCM and TLS 1.3 pass.
func TestServerSpeaksAEADOnly(t *testing.T) {
	dir := t.TempDir()
	ca := testkit.NewCA(t, "relay CA")
	cert, key := ca.Server(t, "relay").WriteFiles(t, dir, "relay")
	s, err := tlsconf.NewServer(tlsconf.ServerFiles{Cert: cert, Key: key})
	assert.NilError(t, err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", s.Config())
	assert.NilError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.(*tls.Conn).Handshake()
			}()
		}
	}()
	dial := func(cfg *tls.Config) error {
		cfg.RootCAs, cfg.ServerName = ca.Pool(), "127.0.0.1"
		c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err == nil {
			c.Close()
		}
		return err
	}
	assert.ErrorContains(t, dial(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}}), "handshake failure")
	assert.NilError(t, dial(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}}))
	assert.NilError(t, dial(&tls.Config{MinVersion: tls.VersionTLS13}))
}
