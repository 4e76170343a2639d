package coresim_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"lhrelay/internal/coresim"
)

var benchBody = `{"guid":"` + guid(1) + `","wdBank":"LHB","wdAcct":"` + acctHuge +
	`","dpBank":"KBK","dpAcct":"22002003004005","amount":1,"memo":"bench"}`

// BenchmarkTransfer is one POST /v1/transfers through the handler, without
// the network. The same GUID is reused: the core is not idempotent, so each
// iteration is a new posting, and the books stay the same size.
func BenchmarkTransfer(b *testing.B) {
	for _, logged := range []bool{false, true} {
		name := "nolog"
		cfg := coresim.Config{}
		if logged {
			name, cfg.Log = "log", io.Discard
		}
		b.Run(name, func(b *testing.B) {
			sim := coresim.New(cfg)
			body := strings.NewReader(benchBody)
			req := httptest.NewRequest(http.MethodPost, "/v1/transfers", body)
			req.Header.Set("X-GUID", guid(1))
			w := &benchWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				body.Reset(benchBody)
				w.status = 0
				sim.ServeHTTP(w, req)
				if w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
			}
		})
	}
}

// benchWriter is a reusable ResponseWriter, so that the benchmark measures the
// handler rather than httptest.ResponseRecorder.
type benchWriter struct {
	h      http.Header
	status int
}

func (w *benchWriter) Header() http.Header  { return w.h }
func (w *benchWriter) WriteHeader(code int) { w.status = code }
func (w *benchWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(p), nil
}

// BenchmarkTransferHTTP is the same POST over loopback HTTP from parallel
// clients, the way the relay's benchmarks use the simulator as a baseline.
func BenchmarkTransferHTTP(b *testing.B) {
	sim := coresim.New(coresim.Config{})
	srv := httptest.NewServer(sim)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	url := srv.URL + "/v1/transfers"
	body := []byte(benchBody)

	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			req.Header.Set("X-GUID", guid(1))
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}
