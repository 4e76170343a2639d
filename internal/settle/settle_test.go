package settle_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/batch"
	"lhrelay/internal/corecall"
	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/outcome"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/settle"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

// lookupCore is the simulator behind a server, counting the lookups (GETs)
// of each GUID as they reach it; with hold, the first lookup waits at
// its gate until the test opens it.
type lookupCore struct {
	sim     *coresim.Server
	srv     *httptest.Server
	mu      sync.Mutex
	lookups map[string]int
	gate    *testkit.Gate // nil without hold
}

func newLookupCore(t *testing.T, hold bool) *lookupCore {
	c := &lookupCore{lookups: map[string]int{}}
	if hold {
		var first atomic.Bool
		c.gate = testkit.NewGate(1).Only(func(*http.Request) bool { return !first.Swap(true) })
	}
	c.sim = coresim.New(coresim.Config{Arrived: func(r *http.Request) {
		if r.Method != http.MethodGet {
			return
		}
		c.mu.Lock()
		c.lookups[r.Header.Get("X-Guid")]++
		c.mu.Unlock()
		if c.gate != nil {
			c.gate.Hold(r)
		}
	}})
	c.srv = httptest.NewServer(c.sim)
	t.Cleanup(c.srv.Close)
	return c
}

func (c *lookupCore) client(t *testing.T) *corecall.Client {
	cl, err := corecall.New(corecall.Config{BaseURL: c.srv.URL, Timeout: 5 * time.Second})
	assert.NilError(t, err)
	t.Cleanup(cl.CloseIdleConnections)
	return cl
}

// seedUnknown claims n transfers and records them UNKNOWN, as a relay whose
// core calls timed out; the first half were posted by the core after all.
func seedUnknown(t *testing.T, l *ledger.Ledger, c *lookupCore, n int) []string {
	ctx := context.Background()
	guids := make([]string, n)
	for i := range guids {
		guids[i] = testkit.GUID()
		frame := testkit.Transfer(t, guids[i], nil)
		claim, err := l.Claim(ctx, ledger.Request{GUID: guids[i], TxCode: testkit.TransferTx().Code, Frame: frame, Body: frame[generated.HeaderLen:]})
		assert.NilError(t, err)
		assert.Equal(t, claim.Outcome, ledger.Owned)
		r, err := wire.ParseRequest(frame)
		assert.NilError(t, err)
		if i < n/2 {
			res := c.client(t).Call(ctx, r.Tx, guids[i], r.Body)
			assert.Equal(t, res.Source, generated.SourceHTTP200, "%v", res.Err)
		}
		rec, _ := outcome.OfCall(nil, &r.Header, corecall.Result{Source: generated.SourceReadTimeout}, time.Now())
		assert.NilError(t, l.Finish(ctx, guids[i], 1, rec))
	}
	return guids
}

func TestMain(m *testing.M) { pgtest.Main(m) }

func openLedger(t *testing.T, db string) *ledger.Ledger {
	l, err := ledger.Open(db)
	assert.NilError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

func newSettler(t *testing.T, l *ledger.Ledger, core *corecall.Client, coreDown func() bool) *settle.Settler {
	s, err := settle.New(settle.Config{Ledger: l, Core: core, Every: time.Hour, StaleSent: time.Hour, CoreDown: coreDown})
	assert.NilError(t, err)
	return s
}

// TestTwoRelaysOneRound: two relays settle one ledger — a SQLite file on
// one host, or a PostgreSQL ledger shared by several — at the same time;
// one runs the round, the other finds it locked, and each row is looked up
// exactly once (counted at the core).
func TestTwoRelaysOneRound(t *testing.T) {
	testkit.EachStore(t, twoRelaysOneRound)
}

func twoRelaysOneRound(t *testing.T, db string) {
	a, b := openLedger(t, db), openLedger(t, db)
	core := newLookupCore(t, true)
	guids := seedUnknown(t, a, core, 50)

	type round struct {
		result settle.Result
		done   int
		failed int
	}
	first := make(chan round, 1)
	go func() {
		res, sum := newSettler(t, a, core.client(t), nil).Round(context.Background())
		first <- round{res, sum.Count("done"), sum.Count("failed")}
	}()
	core.gate.WaitArrival(t) // a holds the round and is looking a row up
	res, sum := newSettler(t, b, core.client(t), nil).Round(context.Background())
	assert.Equal(t, res, settle.Locked)
	assert.Assert(t, sum == nil)
	core.gate.Open()
	got := <-first
	assert.Equal(t, got, round{settle.Ran, 25, 25})

	core.mu.Lock()
	defer core.mu.Unlock()
	assert.Equal(t, len(core.lookups), 50)
	for _, g := range guids {
		assert.Equal(t, core.lookups[g], 1, g)
	}
	for i, g := range guids {
		row, err := b.Get(context.Background(), g)
		assert.NilError(t, err)
		want := ledger.StateFailed
		if i < 25 {
			want = ledger.StateDone
		}
		assert.Equal(t, row.State, want)
	}

	// The lock is free again once the round is over.
	res, _ = newSettler(t, b, core.client(t), nil).Round(context.Background())
	assert.Equal(t, res, settle.Ran)
}

// TestRoundSkippedWhileCoreDown: with the breaker open, a round asks
// nothing and changes nothing.
func TestRoundSkippedWhileCoreDown(t *testing.T) {
	l := openLedger(t, filepath.Join(t.TempDir(), "relay.db"))
	core := newLookupCore(t, false)
	guids := seedUnknown(t, l, core, 2)
	res, _ := newSettler(t, l, core.client(t), func() bool { return true }).Round(context.Background())
	assert.Equal(t, res, settle.CoreDown)
	core.mu.Lock()
	assert.Equal(t, len(core.lookups), 0)
	core.mu.Unlock()
	row, err := l.Get(context.Background(), guids[0])
	assert.NilError(t, err)
	assert.Equal(t, row.State, ledger.StateUnknown)
}

// TestRunStopsWithItsContext: Run returns once its context ends.
func TestRunStopsWithItsContext(t *testing.T) {
	l := openLedger(t, filepath.Join(t.TempDir(), "relay.db"))
	core := newLookupCore(t, false)
	s, err := settle.New(settle.Config{Ledger: l, Core: core.client(t), Every: time.Millisecond})
	assert.NilError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	_, err = settle.New(settle.Config{Ledger: l, Core: core.client(t)})
	assert.ErrorContains(t, err, "interval must be more than 0")
}

// TestRoundAtWrongPathSettlesNothing: a settler whose core URL has a path
// the core does not serve gets 404 for every lookup, posted or not. No
// 404 is trusted: every row stays UNKNOWN (nothing can send it again), and
// the round logs one error naming the URL. With the right URL the next
// settler settles them by the usual rules; the core posted each GUID once
// at most.
func TestRoundAtWrongPathSettlesNothing(t *testing.T) {
	testkit.EachStore(t, roundAtWrongPath)
}

func roundAtWrongPath(t *testing.T, db string) {
	l := openLedger(t, db)
	core := newLookupCore(t, false)
	guids := seedUnknown(t, l, core, 4)
	wrong, err := corecall.New(corecall.Config{BaseURL: core.srv.URL + "/api", Timeout: 5 * time.Second})
	assert.NilError(t, err)
	var logs testkit.SyncBuffer
	s, err := settle.New(settle.Config{Ledger: l, Core: wrong, Every: time.Hour, StaleSent: time.Hour, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	assert.NilError(t, err)
	res, sum := s.Round(context.Background())
	assert.Equal(t, res, settle.Ran)
	assert.Equal(t, sum.Count(batch.OutcomeUnverified), 4)
	assert.Equal(t, sum.Count("failed"), 0)
	for _, g := range guids {
		row, err := l.Get(context.Background(), g)
		assert.NilError(t, err)
		assert.Equal(t, row.State, ledger.StateUnknown, g)
	}
	assert.Assert(t, strings.Contains(logs.String(), "level=ERROR"), logs.String())
	assert.Assert(t, strings.Contains(logs.String(), "check that --core "+core.srv.URL+"/api is the core's base URL"), logs.String())

	res, sum = newSettler(t, l, core.client(t), nil).Round(context.Background())
	assert.Equal(t, res, settle.Ran)
	assert.Equal(t, sum.Count("done"), 2)
	assert.Equal(t, sum.Count("failed"), 2)
	for _, g := range guids {
		assert.Assert(t, core.sim.PostCount(g) <= 1, g)
	}
}

// TestRoundNewLedgerFrameworkNotFound: the relay's settling on a brand-new
// ledger (no DONE row yet) of a core whose 404s are JSON as most web
// frameworks answer, one body for an unknown transfer and another for a
// path it does not serve: the 404s are trusted, the rows settle. A core
// answering both alike is distrusted (rows unchanged) unless the settler
// is given TrustLookup404 (--trust-lookup-404).
func TestRoundNewLedgerFrameworkNotFound(t *testing.T) {
	for _, tc := range []struct {
		name          string
		lookup, path  string
		trust         bool
		failed, unver int
	}{
		{"framework", `{"error":"no such transfer"}`, `{"error":"no such path"}`, false, 2, 0},
		{"alike", `{"error":"not found"}`, `{"error":"not found"}`, false, 0, 2},
		{"alike, trusted", `{"error":"not found"}`, `{"error":"not found"}`, true, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.EachStore(t, func(t *testing.T, db string) {
				l := openLedger(t, db)
				sim := newLookupCore(t, false)
				// Never-posted rows only: no lookup answers 200 to vouch
				// for the route.
				guids := append(seedUnknown(t, l, sim, 1), seedUnknown(t, l, sim, 1)...)
				srv := httptest.NewServer(testkit.FrameworkNotFound(sim.sim, testkit.Fixed(tc.lookup), testkit.Fixed(tc.path)))
				t.Cleanup(srv.Close)
				core, err := corecall.New(corecall.Config{BaseURL: srv.URL, Timeout: 5 * time.Second})
				assert.NilError(t, err)
				s, err := settle.New(settle.Config{Ledger: l, Core: core, Every: time.Hour, StaleSent: time.Hour, TrustLookup404: tc.trust})
				assert.NilError(t, err)
				res, sum := s.Round(context.Background())
				assert.Equal(t, res, settle.Ran)
				assert.Equal(t, sum.Count("failed"), tc.failed, sum.String())
				assert.Equal(t, sum.Count(batch.OutcomeUnverified), tc.unver, sum.String())
				want := ledger.StateFailed
				if tc.unver > 0 {
					want = ledger.StateUnknown
				}
				for _, g := range guids {
					row, err := l.Get(context.Background(), g)
					assert.NilError(t, err)
					assert.Equal(t, row.State, want, g)
				}
			})
		})
	}
}
