package testkit

import (
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
)

// NotFound404 writes a core's 404 body for a request.
type NotFound404 func(r *http.Request) string

// Fixed is a 404 body that is always body.
func Fixed(body string) NotFound404 { return func(*http.Request) string { return body } }

// FrameworkNotFound is sim (a coresim server) answering its 404s as a web
// framework does, application/json with the bodies given: lookup for a
// 404 the simulator answers in JSON (the lookup of a transfer, or an
// account, it does not hold), path for one it answers in net/http's text
// (a path it does not serve). Every other answer is sim's own.
func FrameworkNotFound(sim http.Handler, lookup, path NotFound404) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		sim.ServeHTTP(rec, r)
		if rec.Code != http.StatusNotFound {
			maps.Copy(w.Header(), rec.Header())
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return
		}
		body := path
		if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
			body = lookup
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, body(r))
	})
}
