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
	"lhrelay/internal/testutil"
)

// tlsCore is an https core whose certificate is issued by serverCA and
// which requires a client certificate issued by clientCA (when set). It
// counts the handshakes it completes.
type tlsCore struct {
	srv        *httptest.Server
	handshakes atomic.Int64
	calls      atomic.Int64
}

func startTLSCore(t *testing.T, serverCA, clientCA *testutil.CA, h http.Handler) *tlsCore {
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
	c.srv.TLS = cfg
	c.srv.StartTLS()
	t.Cleanup(c.srv.Close)
	return c
}

func tlsClient(t *testing.T, url string, cfg *tls.Config) *corecall.Client {
	return newClient(t, corecall.Config{BaseURL: url, Timeout: 5 * time.Second, TLS: cfg})
}

func TestTLSCoreWithClientCertificate(t *testing.T) {
	serverCA, clientCA := testutil.NewCA(t, "core CA"), testutil.NewCA(t, "relay CA")
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
	serverCA, clientCA, otherCA := testutil.NewCA(t, "core CA"), testutil.NewCA(t, "relay CA"), testutil.NewCA(t, "other CA")
	core := startTLSCore(t, serverCA, clientCA, reply(http.StatusOK, okTransfer))
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
		want string
	}{
		{"core certificate not trusted", &tls.Config{RootCAs: otherCA.Pool(), Certificates: []tls.Certificate{clientCA.Client(t, "relay").TLS}}, "certificate signed by unknown authority"},
		{"core certificate checked against the system pool", nil, "certificate signed by unknown authority"},
		{"no client certificate", &tls.Config{RootCAs: serverCA.Pool()}, "TLS handshake"},
		{"client certificate from another CA", &tls.Config{RootCAs: serverCA.Pool(), Certificates: []tls.Certificate{otherCA.Client(t, "intruder").TLS}}, "TLS handshake"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tlsClient(t, core.srv.URL, tc.cfg)
			r := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
			assert.Equal(t, r.Source, generated.SourceConnectFail, "err %v", r.Err)
			assert.ErrorContains(t, r.Err, tc.want)
			assert.ErrorContains(t, r.Err, "connecting")
		})
	}
	assert.Equal(t, core.calls.Load(), int64(0), "no request reached the core")
}

// A TLS core that reads the whole request and then resets the connection
// may have posted: E901.
func TestTLSCoreResetAfterReadingIsReadTimeout(t *testing.T) {
	serverCA := testutil.NewCA(t, "core CA")
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
