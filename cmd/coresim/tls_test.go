package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
)

// TestServeTLS: with --tls-cert, --tls-key and --tls-client-ca the
// simulator serves https and requires a client certificate from those
// CAs; the relay's core client, given one, gets its transfer posted, and
// without one gets E902.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, relayCA := testkit.NewCA(t, "core CA"), testkit.NewCA(t, "relay CA")
	cert, key := serverCA.Server(t, "core").WriteFiles(t, dir, "core")
	clientCA := relayCA.WriteCA(t, dir, "relay-ca")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdoutR, stdoutW := io.Pipe()
	var stderr testkit.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--port", "0", "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", clientCA}, stdoutW, &stderr)
		stdoutW.Close()
	}()
	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	assert.NilError(t, err, "stderr: %s", stderr.String())
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "coresim listening on ")
	assert.Assert(t, ok && strings.HasPrefix(base, "https://"), line)
	go io.Copy(io.Discard, stdoutR)

	call := func(cfg *tls.Config) corecall.Result {
		c, err := corecall.New(corecall.Config{BaseURL: base, Timeout: 5 * time.Second, TLS: cfg})
		assert.NilError(t, err)
		defer c.CloseIdleConnections()
		req := &generated.BKTR0001Request{WdBank: "081", WdAcct: "11002003004005", DpBank: "004", DpAcct: "22003004005006", Amount: 1000, Memo: "tls"}
		tx, ok := generated.LookupTransaction(req.TxCode())
		assert.Assert(t, ok)
		return c.Call(context.Background(), tx, "0123456789abcdef0123456789abc001", req)
	}
	r := call(&tls.Config{RootCAs: serverCA.Pool(), Certificates: []tls.Certificate{relayCA.Client(t, "relay").TLS}})
	assert.Equal(t, r.Source, generated.SourceHTTP200, "err %v", r.Err)
	r = call(&tls.Config{RootCAs: serverCA.Pool()})
	assert.Equal(t, r.Source, generated.SourceConnectFail, "err %v", r.Err)

	// Plain http to it fails: it speaks TLS only.
	resp, err := http.Get(strings.Replace(base, "https://", "http://", 1) + "/_stats")
	if err == nil {
		resp.Body.Close()
		assert.Assert(t, resp.StatusCode != http.StatusOK)
	}
	cancel()
	assert.Equal(t, <-done, 0, stderr.String())
}
