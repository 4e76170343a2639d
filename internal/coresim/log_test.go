package coresim_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/coresim"
	"lhrelay/internal/testkit"
)

// serve sends one request straight to the handler.
func serve(h http.Handler, method, target, xguid, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if xguid != "" {
		req.Header.Set("X-GUID", xguid)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestRequestLog(t *testing.T) {
	var buf bytes.Buffer
	sim := coresim.New(coresim.Config{Log: &buf, Now: clock})
	g := guid(1)
	body, _ := json.Marshal(transfer(g, 100, ""))

	serve(sim, http.MethodPost, "/v1/transfers", g, string(body))
	serve(sim, http.MethodPost, "/v1/transfers", g, "{")
	serve(sim, http.MethodGet, "/v1/transfers/"+guid(2), "", "")
	serve(sim, http.MethodGet, "/v1/accounts/LHB/"+acctRich, "", "")
	serve(sim, http.MethodPost, "/v1/transfers", "bad guid\nFORGED 200", "{}")
	serve(sim, http.MethodPost, "/_reset", "", "")
	serve(sim, http.MethodGet, "/a%20b", "", "")

	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	latency := regexp.MustCompile(` [0-9]+\.[0-9]{3}ms$`)
	want := []string{
		"2026-11-29T10:30:00.000+09:00 POST /v1/transfers " + g + " 200",
		"2026-11-29T10:30:00.000+09:00 POST /v1/transfers " + g + " 400",
		"2026-11-29T10:30:00.000+09:00 GET /v1/transfers/" + guid(2) + " " + guid(2) + " 404",
		"2026-11-29T10:30:00.000+09:00 GET /v1/accounts/LHB/" + acctRich + " - 200",
		"2026-11-29T10:30:00.000+09:00 POST /v1/transfers bad?guid?FORGED?200 400",
		"2026-11-29T10:30:00.000+09:00 POST /_reset - 204",
		"2026-11-29T10:30:00.000+09:00 GET /a%20b - 404",
	}
	assert.Equal(t, len(lines), len(want), buf.String())
	for i, line := range lines {
		assert.Check(t, is.Regexp(latency, line))
		assert.Check(t, is.Equal(latency.ReplaceAllString(line, ""), want[i]))
	}
}

func TestRequestLogConcurrent(t *testing.T) {
	var buf testkit.SyncBuffer
	sim := coresim.New(coresim.Config{Log: &buf})
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { serve(sim, http.MethodGet, "/v1/transfers/"+guid(i), "", "") })
	}
	wg.Wait()
	// Every line is whole, and all of them reached the writer: the last
	// writer of a burst flushes.
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	assert.Equal(t, len(lines), 50)
	line := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d) GET /v1/transfers/[0-9a-f]{32} [0-9a-f]{32} 404 \d+\.\d{3}ms$`)
	for _, l := range lines {
		assert.Check(t, is.Regexp(line, l))
	}
}
