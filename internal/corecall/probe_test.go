package corecall

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

// TestProbeMasksPathAndGUID: Probe returns the answer's status, media type
// and body, with the request's own path (with or without the base URL's
// prefix, with or without JSON's escaped slashes) and GUID masked, so that
// a 404 handler echoing them answers two paths alike.
func TestProbeMasksPathAndGUID(t *testing.T) {
	core := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		p := r.URL.Path
		_, _ = w.Write([]byte(`{"path":"` + p + `","escaped":"` + strings.ReplaceAll(p, "/", `\/`) +
			`","route":"` + strings.TrimPrefix(p, "/api") + `","guid":"` + r.Header.Get("X-Guid") + `"}`))
	}))
	defer core.Close()
	c, err := New(Config{BaseURL: core.URL + "/api"})
	assert.NilError(t, err)
	const guid = "0123456789abcdef0123456789abcdef"
	want := Answer{Status: http.StatusNotFound, MediaType: "application/json",
		Body: `{"path":"{path}","escaped":"{path}","route":"{path}","guid":"{guid}"}`}
	for _, path := range []string{"/v1/transfers/" + guid, "/v1/transfers/" + guid + "/elsewhere"} {
		a, err := c.Probe(context.Background(), path, guid)
		assert.NilError(t, err)
		assert.DeepEqual(t, a, want)
	}
}

// TestProbeBodyBounded: a body longer than maxBody is not read whole, and
// the probe says it could not read the answer.
func TestProbeBodyBounded(t *testing.T) {
	core := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write(make([]byte, maxBody+1))
	}))
	defer core.Close()
	c, err := New(Config{BaseURL: core.URL})
	assert.NilError(t, err)
	_, err = c.Probe(context.Background(), "/x", "0123456789abcdef0123456789abcdef")
	assert.ErrorContains(t, err, "reading the answer")
}
