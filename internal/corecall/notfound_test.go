package corecall

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
)

// A core answering 404 to the path itself (the relay calls the wrong
// paths) is recorded E500 and warned about, once a minute at most, with
// the whole URL.
func TestNotFoundPathWarned(t *testing.T) {
	core := httptest.NewServer(http.NotFoundHandler())
	defer core.Close()
	var logs bytes.Buffer
	c, err := New(Config{BaseURL: core.URL + "/api", Log: slog.New(slog.NewTextHandler(&logs, nil))})
	assert.NilError(t, err)
	assert.Assert(t, strings.Contains(c.PathWarning(), `"/api"`), c.PathWarning())
	called := 0
	for _, tx := range generated.Transactions() {
		req, ok := withDefaults(t, tx)
		if _, mapped := tx.StatusSources[http.StatusNotFound]; mapped || !ok {
			continue
		}
		called++
		for range 3 {
			r := c.Call(context.Background(), tx, "0123456789abcdef0123456789abcdef", req)
			assert.Equal(t, r.Source, generated.SourceHTTP500, r.Err)
		}
	}
	assert.Assert(t, called > 0, "no registered transaction to call")
	assert.Equal(t, strings.Count(logs.String(), "the core answered 404"), 1, logs.String())
	assert.Assert(t, strings.Contains(logs.String(), "url="+core.URL+"/api/"), logs.String())
}

// withDefaults is tx's request with the values its layout declares; false
// when a field declares none.
func withDefaults(t *testing.T, tx *generated.Transaction) (generated.RequestBody, bool) {
	req := tx.NewRequest()
	for _, f := range tx.RequestFields {
		if !f.HasDefault {
			return nil, false
		}
		assert.NilError(t, req.Set(f.JSON, f.Default))
	}
	return req, true
}
