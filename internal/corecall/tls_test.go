package corecall_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
)

// tlsCore is an https core whose certificate is issued by serverCA and
// which requires a client certificate issued by clientCA (when set). It
// counts the handshakes it completes.
type tlsCore struct {
	srv        *httptest.Server
	handshakes atomic.Int64
	calls      atomic.Int64
}

func startTLSCore(t *testing.T, serverCA, clientCA *testkit.CA, h http.Handler, edits ...func(*tls.Config)) *tlsCore {
	t.Helper()
	c := &tlsCore{}
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.calls.Add(1)
		h.ServeHTTP(w, r)
	}))
	cfg := &tls.Config{
		Certificates: []tls.Certificate{serverCA.Server(t, "core").TLS},
		VerifyConnection: func(tls.ConnectionState) error {
			c.handshakes.Add(1)
			return nil
		},
	}
	if clientCA != nil {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = clientCA.Pool()
	}
	for _, edit := range edits {
		edit(cfg)
	}
	c.srv.TLS = cfg
	c.srv.StartTLS()
	t.Cleanup(c.srv.Close)
	return c
}

func tlsClient(t *testing.T, url string, cfg *tls.Config) *corecall.Client {
	return newClient(t, corecall.Config{BaseURL: url, Timeout: 5 * time.Second, TLS: cfg})
}

func TestTLSCoreWithClientCertificate(t *testing.T) {
	serverCA, clientCA := testkit.NewCA(t, "core CA"), testkit.NewCA(t, "relay CA")
	core := startTLSCore(t, serverCA, clientCA, reply(http.StatusOK, okTransfer))
	c := tlsClient(t, core.srv.URL, &tls.Config{
		RootCAs:      serverCA.Pool(),
		Certificates: []tls.Certificate{clientCA.Client(t, "relay").TLS},
	})
	for range 20 {
		r := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
		assert.Equal(t, r.Source, generated.SourceHTTP200, "err %v", r.Err)
	}
	// The connection is reused: one handshake for all the calls.
	assert.Equal(t, core.handshakes.Load(), int64(1))
}

func TestTLSHandshakeFailuresAreConnectFail(t *testing.T) {
	serverCA, clientCA, otherCA := testkit.NewCA(t, "core CA"), testkit.NewCA(t, "relay CA"), testkit.NewCA(t, "other CA")
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		core := startTLSCore(t, serverCA, clientCA, reply(http.StatusOK, okTransfer), func(c *tls.Config) {
			c.MinVersion, c.MaxVersion = version, version
		})
		// The relay's certificate is refused in the handshake in TLS 1.2;
		// in TLS 1.3 by an alert read after the request was written.
		refused := "TLS handshake"
		if version == tls.VersionTLS13 {
			refused = "remote error: tls: certificate required"
		}
		for _, tc := range []struct {
			name string
			cfg  *tls.Config
			want string
		}{
			{"core certificate not trusted", &tls.Config{RootCAs: otherCA.Pool(), Certificates: []tls.Certificate{clientCA.Client(t, "relay").TLS}}, "certificate signed by unknown authority"},
			{"core certificate checked against the system pool", nil, "certificate signed by unknown authority"},
			{"no client certificate", &tls.Config{RootCAs: serverCA.Pool()}, refused},
			{"client certificate from another CA", &tls.Config{RootCAs: serverCA.Pool(), Certificates: []tls.Certificate{otherCA.Client(t, "intruder").TLS}}, refused},
		} {
			t.Run(tls.VersionName(version)+"/"+tc.name, func(t *testing.T) {
				c := tlsClient(t, core.srv.URL, tc.cfg)
				r := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
				assert.Equal(t, r.Source, generated.SourceConnectFail, "err %v", r.Err)
				assert.ErrorContains(t, r.Err, tc.want)
			})
		}
		assert.Equal(t, core.calls.Load(), int64(0), "no request reached the core")
	}
}

// TestTLS13CoreRefusesClientCertificate: against a TLS 1.3 core that
// refuses the relay's certificate, the relay writes its request before it
// learns of the refusal, yet the core processed nothing: every call is
// E902 (see dialTLS), however often it is made, on fresh connections.
func TestTLS13CoreRefusesClientCertificate(t *testing.T) {
	serverCA, coreTrusts, relayCA := testkit.NewCA(t, "core CA"), testkit.NewCA(t, "trusted CA"), testkit.NewCA(t, "relay CA")
	core := startTLSCore(t, serverCA, coreTrusts, reply(http.StatusOK, okTransfer), func(c *tls.Config) {
		c.MinVersion = tls.VersionTLS13
	})
	// A certificate the core does not trust, presented anyway (as a
	// relay whose CA the core stopped trusting would): unknown_ca.
	leaf := relayCA.Client(t, "relay").TLS
	c := tlsClient(t, core.srv.URL, &tls.Config{
		RootCAs:              serverCA.Pool(),
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &leaf, nil },
	})
	for range 20 {
		r := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
		assert.Equal(t, r.Source, generated.SourceConnectFail, "err %v", r.Err)
		assert.ErrorContains(t, r.Err, "remote error: tls: unknown certificate authority")
	}
	assert.Equal(t, core.calls.Load(), int64(0))
}

// TestTLSVersionAndSuites: TLS 1.3 is spoken when the core speaks it; a
// TLS 1.2 core offering only a CBC-SHA1 suite is refused (E902).
func TestTLSVersionAndSuites(t *testing.T) {
	serverCA := testkit.NewCA(t, "core CA")
	var version atomic.Uint32
	core := startTLSCore(t, serverCA, nil, reply(http.StatusOK, okTransfer), func(c *tls.Config) {
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			version.Store(uint32(cs.Version))
			return nil
		}
	})
	c := tlsClient(t, core.srv.URL, &tls.Config{RootCAs: serverCA.Pool()})
	r := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, r.Source, generated.SourceHTTP200, "err %v", r.Err)
	assert.Equal(t, uint16(version.Load()), uint16(tls.VersionTLS13))

	cbc := startTLSCore(t, serverCA, nil, reply(http.StatusOK, okTransfer), func(c *tls.Config) {
		c.MaxVersion = tls.VersionTLS12
		c.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}
	})
	c = tlsClient(t, cbc.srv.URL, &tls.Config{RootCAs: serverCA.Pool()})
	r = c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, r.Source, generated.SourceConnectFail, "err %v", r.Err)
	assert.ErrorContains(t, r.Err, "handshake failure")
	assert.Equal(t, cbc.calls.Load(), int64(0))
}

// A TLS core that reads the whole request and then resets the connection
// may have posted: E901.
func TestTLSCoreResetAfterReadingIsReadTimeout(t *testing.T) {
	serverCA := testkit.NewCA(t, "core CA")
	core := startTLSCore(t, serverCA, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		tc := conn.(*tls.Conn).NetConn().(*net.TCPConn)
		tc.SetLinger(0) // close with a reset
		tc.Close()
	}))
	c := tlsClient(t, core.srv.URL, &tls.Config{RootCAs: serverCA.Pool()})
	r := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, r.Source, generated.SourceReadTimeout, "err %v", r.Err)
	assert.Equal(t, core.calls.Load(), int64(1))
}

// A core that accepts TCP but never answers the ClientHello fails the
// handshake within the connect timeout: E902, long before --timeout.
func TestTLSHandshakeTimeoutIsConnectFail(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	held := make(chan net.Conn, 8)
	t.Cleanup(func() {
		ln.Close()
		close(held)
		for c := range held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held <- c // held open, never answered
		}
	}()
	c := newClient(t, corecall.Config{BaseURL: "https://" + ln.Addr().String(), Timeout: 5 * time.Second, ConnectTimeout: 100 * time.Millisecond})
	r := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, r.Source, generated.SourceConnectFail, "err %v", r.Err)
	assert.Assert(t, r.Elapsed < 4*time.Second, "took %v", r.Elapsed)
	assert.Assert(t, strings.Contains(r.Err.Error(), "TLS handshake"), "err %v", r.Err)
}
