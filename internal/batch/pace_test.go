package batch

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/admit"
	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

// TestBatchOldestFirst: resolve and reprocess take their rows by the time
// each was first claimed, the customer who waited longest first, however
// recently a row was last updated.
func TestBatchOldestFirst(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		c := newCore(t)
		var mu sync.Mutex
		var posts, lookups []string
		before := func(_ http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case r.Method == http.MethodPost:
				posts = append(posts, r.Header.Get("X-GUID"))
			case strings.HasPrefix(r.URL.Path, "/v1/transfers/"):
				lookups = append(lookups, strings.TrimPrefix(r.URL.Path, "/v1/transfers/"))
			}
		}
		c.before.Store(&before)
		const n = 6
		var failed, unknown []string
		for i := range n {
			// Claimed in this order; the first claimed was updated last.
			failed = append(failed, tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Duration(i+1)*time.Hour))
		}
		for i := range n {
			unknown = append(unknown, tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Duration(i+1)*time.Hour))
		}
		one := Pace{MaxInFlight: 1, Rows: 1}
		_, err := Reprocess(context.Background(), tl.l, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now(), Pace: one})
		assert.NilError(t, err)
		assert.DeepEqual(t, posts, failed)

		mu.Lock()
		lookups = nil
		mu.Unlock()
		_, err = Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{MinAge: time.Minute, Now: time.Now(), Pace: one})
		assert.NilError(t, err)
		// Only the rows' own lookups: the guard's check also looks up a
		// posted row and a new GUID.
		isUnknown := map[string]bool{}
		for _, g := range unknown {
			isUnknown[g] = true
		}
		var got []string
		for _, g := range lookups {
			if isUnknown[g] {
				got = append(got, g)
			}
		}
		assert.DeepEqual(t, got, unknown)
	})
}

// TestBatchAdmissionWaits: a run whose calls the admission does not admit
// at once waits for a slot: with one slot for eight rows in flight,
// every row is sent (none recorded E902 for want of a slot, none E901),
// and the core never has more than one call at a time.
func TestBatchAdmissionWaits(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		sim := coresim.New(coresim.Config{})
		var cur, peak atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := cur.Add(1)
			defer cur.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			sim.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		const rows = 100
		for range rows {
			tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
		}
		lim, err := admit.New(admit.Settings{Max: 1, Timeout: 2 * time.Second, MaxWait: time.Millisecond})
		assert.NilError(t, err)
		s, err := Reprocess(context.Background(), tl.l, clientOf(t, srv.URL), ReprocessConfig{MaxAttempts: 3, Now: time.Now(),
			Pace: Pace{MaxInFlight: 8, Limiter: lim}})
		assert.NilError(t, err)
		assert.Equal(t, s.String(), "reprocess: selected=100 skipped=0 not_tried=0 exhausted=0 0000=100")
		assert.Equal(t, peak.Load(), int64(1))
		assert.Equal(t, lim.InFlight(), 0)
	})
}

// TestBatchYields: a run that yields (the relay's settling) takes no call
// slot while the frames hold every one, and settles its rows once they
// free one.
func TestBatchYields(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		c := newCore(t)
		g := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
		lim, err := admit.New(admit.Settings{Max: 2, Timeout: 2 * time.Second, Fixed: true})
		assert.NilError(t, err)
		var frames []admit.Permit
		for range 2 {
			p, err := lim.Acquire()
			assert.NilError(t, err)
			frames = append(frames, p)
		}
		done := make(chan *Summary, 1)
		go func() {
			s, _ := Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{MinAge: time.Minute, Now: time.Now(),
				Pace: Pace{MaxInFlight: 4, Limiter: lim, Yield: true}})
			done <- s
		}()
		select {
		case s := <-done:
			t.Fatalf("the run took a slot the frames held: %s", s)
		case <-time.After(300 * time.Millisecond):
		}
		assert.Equal(t, c.requests.Load(), int64(0), "no lookup while the frames hold every slot")
		frames[0].Done(admit.Ignored, 0)
		select {
		case s := <-done:
			assert.Equal(t, s.Count("failed"), 1)
		case <-time.After(10 * time.Second):
			t.Fatal("the run did not settle once a slot was free")
		}
		assert.Equal(t, tl.row(g).State, ledger.StateFailed)
		frames[1].Done(admit.Ignored, 0)
		assert.Equal(t, lim.InFlight(), 0)
	})
}
