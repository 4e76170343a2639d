package ledger

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lhrelay/internal/testkit"
)

// BenchmarkClaimFinish measures one transfer's ledger work (Claim, then
// Finish to DONE) with 1, 16 and 64 concurrent channels, on each store: a
// real file with synchronous=FULL, and a PostgreSQL schema on the tests'
// throwaway server (synchronous_commit=on). It reports transfers per second
// and group commits per transfer (2 would mean no grouping at all).
//
// It starts exactly `channels` goroutines rather than using RunParallel,
// whose goroutine count is a multiple of GOMAXPROCS.
func BenchmarkClaimFinish(b *testing.B) {
	for _, st := range testkit.Stores {
		for _, channels := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/channels=%d", st.Name, channels), func(b *testing.B) {
				benchClaimFinish(b, st.New(b), channels)
			})
		}
	}
}

// BenchmarkClaimFinishLater is BenchmarkClaimFinish with the outcome
// queued by FinishLater, as the relay records a 0000: the channel goes on
// to its next claim at once.
func BenchmarkClaimFinishLater(b *testing.B) {
	for _, st := range testkit.Stores {
		for _, channels := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/channels=%d", st.Name, channels), func(b *testing.B) {
				benchClaimFinishLater(b, st.New(b), channels, true)
			})
		}
	}
}

func benchClaimFinish(b *testing.B, db string, channels int) {
	benchClaimFinishLater(b, db, channels, false)
}

func benchClaimFinishLater(b *testing.B, db string, channels int, later bool) {
	l, err := Open(db)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()

	// Frames prepared up front so the loop measures the ledger only.
	reqs := make([]Request, b.N)
	for i := range reqs {
		reqs[i] = request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	}
	resp := responseFrame(testkit.GUID(), codeOK)

	var next atomic.Int64
	var failed atomic.Value
	var wg, recorded sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	commits0 := l.Commits()
	start := time.Now()
	for range channels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(reqs) {
					return
				}
				r := reqs[i]
				c, err := l.Claim(ctx, r)
				if err == nil && c.Outcome != Owned {
					err = fmt.Errorf("claim %s: %v", r.GUID, c.Outcome)
				}
				o := Outcome{Why: Why{Reason: "test"}, State: StateDone, RspCode: codeOK, Response: resp}
				switch {
				case err == nil && later:
					recorded.Add(1)
					err = l.FinishLater(ctx, r.GUID, 1, o, func(err error) {
						if err != nil {
							failed.Store(err)
						}
						recorded.Done()
					})
					if err != nil {
						recorded.Done()
					}
				case err == nil:
					err = l.Finish(ctx, r.GUID, 1, o)
				}
				if err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	recorded.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tx/s")
	b.ReportMetric(float64(l.Commits()-commits0)/float64(b.N), "commits/tx")
}
