package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/assemble"
	"lhrelay/internal/channel"
	"lhrelay/internal/generated"
)

// TestPathSegmentValues: BKDC0001's text field fills one segment of the
// core's path. A value that would not address that one segment (empty,
// ".", "..") is E102 and never reaches the core; any other is escaped into
// its segment.
func TestPathSegmentValues(t *testing.T) {
	tx, ok := generated.LookupTransaction("BKDC0001")
	assert.Assert(t, ok, "BKDC0001 is registered by its layout")

	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.EscapedPath())
		mu.Unlock()
		fmt.Fprint(w, `{"issuedAt":"20261201093000"}`)
	}))
	t.Cleanup(srv.Close)
	r, err := assemble.Start(context.Background(), assemble.Config{
		Listen: "127.0.0.1:0", Core: srv.URL, Timeout: 2 * time.Second, DB: filepath.Join(t.TempDir(), "relay.db"),
	})
	assert.NilError(t, err)
	t.Cleanup(r.Close)
	conn, err := channel.Dial(context.Background(), r.Addr().String(), 5*time.Second)
	assert.NilError(t, err)
	t.Cleanup(func() { conn.Close() })

	ask := func(docID string) generated.RspCode {
		t.Helper()
		frame, err := channel.BuildRequest(tx.Code, channel.NewGUID(), map[string]string{"docId": docID}, time.Now())
		assert.NilError(t, err)
		out, err := conn.Send(frame)
		assert.NilError(t, err)
		a, err := channel.Decode(out)
		assert.NilError(t, err)
		return a.Code
	}
	for _, bad := range []string{"", ".", ".."} {
		assert.Equal(t, ask(bad), generated.SourceBadFrame.Code(), "docId %q", bad)
	}
	mu.Lock()
	assert.Equal(t, len(paths), 0, "no core call for a value that is not one segment: %v", paths)
	mu.Unlock()

	for _, good := range []string{"a.b", "...", "a/b"} {
		assert.Equal(t, ask(good), generated.SourceHTTP200.Code(), "docId %q", good)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.DeepEqual(t, paths, []string{"/v1/documents/a.b", "/v1/documents/...", "/v1/documents/a%2Fb"})
}
