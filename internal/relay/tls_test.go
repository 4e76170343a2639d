package relay

import (
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/testkit"
	"lhrelay/internal/tlsconf"
)

// dialTLS opens a TLS channel connection with cfg and completes the
// handshake.
func (e *env) dialTLS(cfg *tls.Config) *tls.Conn {
	e.t.Helper()
	cfg = cfg.Clone()
	cfg.ServerName = "127.0.0.1"
	c := tls.Client(e.dial(), cfg)
	assert.NilError(e.t, c.Handshake())
	return c
}

// expectRefused sends frame over a connection made with cfg (plain TCP
// when cfg is nil) to a relay that must refuse it during the handshake:
// no answer comes back, and the relay closes the connection.
//
// It returns once the relay has closed the connection, which it does after
// counting the failed handshake: the client's side of a TLS handshake may
// end with the relay's alert, before the relay has counted anything.
func (e *env) expectRefused(cfg *tls.Config, frame []byte) {
	e.t.Helper()
	raw := e.dial()
	c := raw
	if cfg != nil {
		cfg = cfg.Clone()
		cfg.ServerName = "127.0.0.1"
		c = tls.Client(raw, cfg)
	}
	c.Write(frame) // may fail already: the handshake is refused
	b, _ := io.ReadAll(c)
	assert.Assert(e.t, !strings.Contains(string(b), string(frame[12:44])), "an answer came back: %q", b)
	_, err := io.Copy(io.Discard, raw) // until the relay's close: end of stream or a reset
	assert.Assert(e.t, !errors.Is(err, os.ErrDeadlineExceeded), "the relay kept the refused connection open")
}

// channelTLS is the relay's channel side: a server certificate from
// serverCA, client certificates required from channelCA.
func channelTLS(t testing.TB, serverCA, channelCA *testkit.CA) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{serverCA.Server(t, "relay").TLS},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    channelCA.Pool(),
	}
}

func TestTLSChannel(t *testing.T) {
	serverCA, channelCA, otherCA := testkit.NewCA(t, "relay CA"), testkit.NewCA(t, "channel CA"), testkit.NewCA(t, "other CA")
	core := &counting{h: simCore(0)}
	oe := startObserved(t, observed{core: core, metrics: true, more: func(c *envConfig) {
		c.tls = channelTLS(t, serverCA, channelCA)
	}})

	guid := testkit.GUID()
	c := oe.dialTLS(&tls.Config{RootCAs: serverCA.Pool(), Certificates: []tls.Certificate{channelCA.Client(t, "atm-0001").TLS}})
	a := oe.send(c, transferFrame(t, guid))
	assert.Equal(t, a.code(), string(generated.RspHTTP200))
	assert.Equal(t, oe.row(guid).State, ledger.StateDone)
	assert.Equal(t, oe.frameLine(guid)["client"], "CN=atm-0001,O=lhrelay tests")
	assert.Equal(t, core.calls.Load(), int64(1))

	for _, tc := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"no client certificate", &tls.Config{RootCAs: serverCA.Pool()}},
		{"client certificate from another CA", &tls.Config{RootCAs: serverCA.Pool(), Certificates: []tls.Certificate{otherCA.Client(t, "intruder").TLS}}},
		{"plain TCP", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			guid := testkit.GUID()
			oe.expectRefused(tc.cfg, transferFrame(t, guid))
			oe.noRow(guid)
		})
	}
	assert.Equal(t, core.calls.Load(), int64(1), "nothing refused reached the core")
	assert.Equal(t, oe.scrape()["lhrelay_tls_handshake_failures_total"], "3")
	assert.Assert(t, strings.Contains(oe.log.String(), "TLS handshake failed"))
}

// SIGHUP's work: the channel side's files are re-read, the next
// connection's handshake uses the new certificate, an open connection
// keeps going, and a bad new file keeps the old certificate.
func TestTLSChannelReload(t *testing.T) {
	ca := testkit.NewCA(t, "relay CA")
	dir := t.TempDir()
	files := tlsconf.ServerFiles{Cert: filepath.Join(dir, "relay.crt"), Key: filepath.Join(dir, "relay.key")}
	ca.Server(t, "relay-v1").WriteFiles(t, dir, "relay")
	srvTLS, err := tlsconf.NewServer(files)
	assert.NilError(t, err)
	e := startEnv(t, envConfig{core: simCore(0), ledger: true, tls: srvTLS.Config()})

	serverName := func(c *tls.Conn) string { return c.ConnectionState().PeerCertificates[0].Subject.CommonName }
	clientCfg := &tls.Config{RootCAs: ca.Pool()}
	old := e.dialTLS(clientCfg)
	assert.Equal(t, serverName(old), "relay-v1")

	ca.Server(t, "relay-v2").WriteFiles(t, dir, "relay")
	assert.NilError(t, srvTLS.Reload())
	next := e.dialTLS(clientCfg)
	assert.Equal(t, serverName(next), "relay-v2")
	assert.Equal(t, e.send(next, transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
	assert.Equal(t, e.send(old, transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200), "an open connection is not dropped")

	testkit.WriteFile(t, files.Cert, []byte("not a certificate"))
	assert.ErrorContains(t, srvTLS.Reload(), "--tls-cert")
	assert.Equal(t, serverName(e.dialTLS(clientCfg)), "relay-v2", "a bad file keeps the certificate in force")
}

// startMTLSCore is an https simulator requiring a client certificate from
// clientCA; it counts handshakes.
func startMTLSCore(t *testing.T, serverCA, clientCA *testkit.CA, h http.Handler) (*httptest.Server, *atomic.Int64) {
	var handshakes atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{serverCA.Server(t, "core").TLS},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCA.Pool(),
		VerifyConnection: func(tls.ConnectionState) error {
			handshakes.Add(1)
			return nil
		},
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, &handshakes
}

func TestTLSBothSides(t *testing.T) {
	relayCA, channelCA, coreCA := testkit.NewCA(t, "relay CA"), testkit.NewCA(t, "channel CA"), testkit.NewCA(t, "core CA")
	core, handshakes := startMTLSCore(t, coreCA, relayCA, simCore(0))
	e := startEnv(t, envConfig{
		coreURL: core.URL, ledger: true,
		tls:     channelTLS(t, relayCA, channelCA),
		coreTLS: &tls.Config{RootCAs: coreCA.Pool(), Certificates: []tls.Certificate{relayCA.Client(t, "relay").TLS}},
	})
	c := e.dialTLS(&tls.Config{RootCAs: relayCA.Pool(), Certificates: []tls.Certificate{channelCA.Client(t, "branch-7").TLS}})
	for range 5 {
		guid := testkit.GUID()
		assert.Equal(t, e.send(c, transferFrame(t, guid)).code(), string(generated.RspHTTP200))
		assert.Equal(t, e.row(guid).RspCode, string(generated.RspHTTP200))
	}
	assert.Equal(t, handshakes.Load(), int64(1), "the connection to the core is reused")
}

func TestTLSCoreNotTrusted(t *testing.T) {
	relayCA, coreCA, otherCA := testkit.NewCA(t, "relay CA"), testkit.NewCA(t, "core CA"), testkit.NewCA(t, "other CA")
	sim := &counting{h: simCore(0)}
	core, _ := startMTLSCore(t, coreCA, relayCA, sim)
	oe := startObserved(t, observed{coreURL: core.URL, more: func(c *envConfig) {
		c.coreTLS = &tls.Config{RootCAs: otherCA.Pool(), Certificates: []tls.Certificate{relayCA.Client(t, "relay").TLS}}
	}})
	guid := testkit.GUID()
	assert.Equal(t, oe.roundTrip(transferFrame(t, guid)).code(), string(generated.RspConnectFail))
	row := oe.row(guid)
	assert.Equal(t, row.State, ledger.StateFailed)
	assert.Equal(t, row.RspCode, string(generated.RspConnectFail))
	line := oe.frameLine(guid)
	assert.Assert(t, strings.Contains(line["err"].(string), "certificate signed by unknown authority"), "err %v", line["err"])
	assert.Equal(t, sim.calls.Load(), int64(0))
}

// A channel handshake that does not finish within the frame timeout drops
// the connection, so a client that connects and says nothing over TLS
// holds nothing.
func TestTLSChannelHandshakeTimeout(t *testing.T) {
	ca := testkit.NewCA(t, "relay CA")
	closed := make(chan struct{}, 1)
	e := startEnv(t, envConfig{core: simCore(0), frameTimeout: 100 * time.Millisecond, tls: &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "relay").TLS}},
		connDone: func() { closed <- struct{}{} }})
	c := e.dial()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the silent connection was not closed")
	}
	c.Close()
	assert.Assert(t, strings.Contains(e.log.String(), "TLS handshake failed"))
}
