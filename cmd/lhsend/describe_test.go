package main

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/assemble"
	"lhrelay/internal/channel"
	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
)

// startRelay serves a relay in-process in front of a simulated core.
func startRelay(t *testing.T) string {
	t.Helper()
	core := httptest.NewServer(coresim.New(coresim.Config{}))
	t.Cleanup(core.Close)
	r, err := assemble.Start(context.Background(), assemble.Config{
		Listen: "127.0.0.1:0", Core: core.URL, DB: filepath.Join(t.TempDir(), "relay.db"),
	})
	assert.NilError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.Check(t, r.Stop(ctx))
	})
	return r.Addr().String()
}

// --describe lists every registered transaction and every request field
// with its place in the frame.
func TestDescribe(t *testing.T) {
	r := runCmd(t, "", "--describe")
	assert.Equal(t, r.code, 0, r.stderr)
	for _, tx := range generated.Transactions() {
		assert.Check(t, is.Contains(r.stdout, tx.Code+" "))
		assert.Check(t, is.Contains(r.stdout, tx.Method+" "+tx.Path))
		for _, f := range tx.RequestFields {
			assert.Check(t, is.Regexp(`(?m)^  `+f.Name+` +`+f.JSON+` +\d+ +\d+ +`+f.Kind, r.stdout))
		}
	}
}

// --print prints the frame that would be sent, and sends nothing.
func TestPrint(t *testing.T) {
	r := runCmd(t, "", "--addr", testkit.ClosedAddr(t), "--print", "--guid", guid)
	assert.Equal(t, r.code, 0, r.stderr)
	h, _, err := channel.DecodeRequest([]byte(strings.TrimSuffix(r.stdout, "\n")))
	assert.NilError(t, err)
	assert.Equal(t, h.GUID, guid)
	assert.Equal(t, h.TxCode, generated.ClientDefault().Code)
}

// --bad draws E101 and E102 from a relay without hand-built bytes.
func TestBadFrames(t *testing.T) {
	addr := startRelay(t)
	for _, code := range []generated.RspCode{generated.RspUnknownTx, generated.RspBadFrame} {
		r := runCmd(t, "", "--addr", addr, "--bad", string(code), "--json", "--guid", guid)
		assert.Equal(t, r.code, 0, "%s: %s", code, r.stderr)
		assert.Check(t, is.Contains(r.stdout, `"rspCode":"`+string(code)+`"`), "%s: %s", code, r.stdout)
	}
	r := runCmd(t, "", "--addr", addr, "--bad", "E999")
	oneLineError(t, r, 2, "--bad E999")
}
