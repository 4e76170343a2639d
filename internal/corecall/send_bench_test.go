package corecall_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
)

// BenchmarkSend measures one core call end to end against an httptest
// core that answers every transfer with a fixed 200: the client's CPU and
// allocations per call (the core's are included; compare variants in one
// run).
func BenchmarkSend(b *testing.B) {
	tx, ok := generated.LookupTransaction("BKTR0001")
	assert.Assert(b, ok)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g := r.Header.Get("X-Guid")
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"guid":"%s","txId":"T000000000000001","balance":950000,"postedAt":"20261129103000"}`, g)
	}))
	b.Cleanup(srv.Close)
	for _, conc := range []int{1, 8} {
		b.Run(fmt.Sprintf("c%d", conc), func(b *testing.B) {
			c, err := corecall.New(corecall.Config{BaseURL: srv.URL, Timeout: 10 * time.Second, MaxIdleConns: conc})
			assert.NilError(b, err)
			b.Cleanup(c.CloseIdleConnections)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var seq atomic.Uint64
			b.SetParallelism(conc)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					g := fmt.Sprintf("%032x", seq.Add(1))
					p, err := corecall.Prepare(tx, g, transfer("rent"))
					if err != nil {
						b.Error(err)
						return
					}
					if res := c.Send(ctx, p); res.Source != generated.SourceHTTP200 {
						b.Errorf("%s: %s: %v", g, res.Source, res.Err)
						return
					}
				}
			})
		})
	}
}
