package batch

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/corecall"
	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

// core is a real simulator behind a real HTTP server that counts the
// POSTs reaching it (resolve must never POST) and can be switched to
// failing lookups.
type core struct {
	sim         *coresim.Server
	srv         *httptest.Server
	posts       atomic.Int64
	failLookups atomic.Bool
	// requests counts every request that reached the server; before,
	// when set, runs as each one arrives, before the core serves it.
	requests atomic.Int64
	before   atomic.Pointer[func(http.ResponseWriter, *http.Request)]
	// notFound, when set, serves in the simulator's place (answer404).
	notFound atomic.Pointer[http.Handler]
	// serve, when set, answers the requests it returns true for in the
	// simulator's place.
	serve atomic.Pointer[func(http.ResponseWriter, *http.Request) bool]
}

func newCore(t *testing.T) *core {
	c := &core{}
	c.sim = coresim.New(coresim.Config{Arrived: func(r *http.Request) {
		if r.Method == http.MethodPost {
			c.posts.Add(1)
		}
	}})
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.requests.Add(1)
		if f := c.before.Load(); f != nil {
			(*f)(w, r)
		}
		if f := c.serve.Load(); f != nil && (*f)(w, r) {
			return
		}
		if r.Method == http.MethodGet && c.failLookups.Load() {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
		if h := c.notFound.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		c.sim.ServeHTTP(w, r)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// answer404 makes c answer its 404s as a web framework does
// (testkit.FrameworkNotFound): JSON, lookup's body for an unknown
// transfer, path's for a path it does not serve.
func (c *core) answer404(lookup, path testkit.NotFound404) {
	h := testkit.FrameworkNotFound(c.sim, lookup, path)
	c.notFound.Store(&h)
}

func (c *core) client(t *testing.T) *corecall.Client { return clientOf(t, c.srv.URL) }

// clientAt is a client of c's server with path appended to its URL: a
// base URL with a path the core does not serve (a typo in --core).
func (c *core) clientAt(t *testing.T, path string) *corecall.Client {
	return clientOf(t, c.srv.URL+path)
}

// clientOf is a core client of url.
func clientOf(t *testing.T, url string) *corecall.Client {
	cl, err := corecall.New(corecall.Config{BaseURL: url, Timeout: 2 * time.Second})
	assert.NilError(t, err)
	return cl
}

// post makes the core post a transfer for guid, as if the relay's call had
// reached it before timing out.
func (c *core) post(t *testing.T, tl *testLedger, guid string) {
	row := tl.row(guid)
	r, err := wire.ParseRequest(row.Request)
	assert.NilError(t, err)
	res := c.client(t).Call(context.Background(), r.Tx, guid, r.Body)
	assert.Equal(t, res.Source, generated.SourceHTTP200, "%v", res.Err)
}

// closedCore is a core client of a URL on which nothing listens.
func closedCore(t *testing.T) *corecall.Client { return clientOf(t, testkit.ClosedURL(t)) }

func TestResolveSelectionAndOutcomes(t *testing.T) {
	eachStore(t, testResolveSelectionAndOutcomes)
}

func testResolveSelectionAndOutcomes(t *testing.T, tl *testLedger) {
	c := newCore(t)
	posted := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, 2*time.Minute)
	neverPosted := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, 2*time.Minute)
	young := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, 50*time.Second)
	staleSent := tl.seed(ledger.StateSent, "", 11*time.Minute)
	freshSent := tl.seed(ledger.StateSent, "", 9*time.Minute)
	failed := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
	c.post(t, tl, posted)
	c.post(t, tl, staleSent)
	postsBefore := c.posts.Load()

	s, err := Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{MinAge: time.Minute, StaleSent: 10 * time.Minute, Now: time.Now()})
	assert.NilError(t, err)
	assert.Equal(t, s.String(), "resolve: selected=3 done=2 failed=1 unreachable=0 skipped=0 unknown_tx=0 undecodable=0")
	assert.Equal(t, c.posts.Load(), postsBefore, "resolve never POSTs")

	// 200 → DONE, 0000, a response frame from the stored header and the lookup.
	for _, g := range []string{posted, staleSent} {
		row := tl.row(g)
		assert.Equal(t, row.State, ledger.StateDone)
		assert.Equal(t, row.RspCode, string(generated.RspHTTP200))
		var h generated.Header
		assert.NilError(t, h.Decode(string(row.Response[:generated.HeaderLen])))
		assert.Equal(t, h.GUID, g)
		assert.Equal(t, h.Flag, generated.FlagResponse)
		assert.Equal(t, h.SrcOrg, "999", "institutions swapped from the stored request")
		var body generated.BKTR0001Response
		assert.NilError(t, body.Decode(string(row.Response[generated.HeaderLen:])))
		assert.Equal(t, body.Balance > 0, true)
	}
	// 404 → FAILED, E902.
	row := tl.row(neverPosted)
	assert.Equal(t, row.State, ledger.StateFailed)
	assert.Equal(t, row.RspCode, string(generated.RspConnectFail))
	assert.Equal(t, len(row.Response), generated.HeaderLen)
	// Not selected: too young, SENT not yet stale, FAILED.
	assert.Equal(t, tl.row(young).State, ledger.StateUnknown)
	assert.Equal(t, tl.row(freshSent).State, ledger.StateSent)
	assert.Equal(t, tl.row(failed).Attempts, 1)
}

func TestResolveLongHeaderLine(t *testing.T) {
	eachStore(t, testResolveLongHeaderLine)
}

// A lookup's 200 carrying a header line longer than the core client's read
// buffer (a gateway's trace header or cookie) settles the row DONE.
func testResolveLongHeaderLine(t *testing.T, tl *testLedger) {
	c := newCore(t)
	g := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
	c.post(t, tl, g)
	trace := strings.Repeat("t", 5<<10)
	before := func(w http.ResponseWriter, r *http.Request) { w.Header().Set("X-Gateway-Trace", trace) }
	c.before.Store(&before)

	s, err := Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{MinAge: time.Minute, Now: time.Now()})
	assert.NilError(t, err)
	assert.Equal(t, s.Count("done"), 1)
	row := tl.row(g)
	assert.Equal(t, row.State, ledger.StateDone)
	assert.Equal(t, row.RspCode, string(generated.RspHTTP200))
}

func TestResolveMinAgeBoundary(t *testing.T) {
	eachStore(t, testResolveMinAgeBoundary)
}

func testResolveMinAgeBoundary(t *testing.T, tl *testLedger) {
	c := newCore(t)
	older := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, 62*time.Second)
	younger := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, 58*time.Second)
	s, err := Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{MinAge: time.Minute, Now: time.Now()})
	assert.NilError(t, err)
	assert.Equal(t, s.Count("selected"), 1)
	assert.Equal(t, tl.row(older).State, ledger.StateFailed)
	assert.Equal(t, tl.row(younger).State, ledger.StateUnknown)
}

func TestResolveStaleSentOff(t *testing.T) {
	eachStore(t, testResolveStaleSentOff)
}

func testResolveStaleSentOff(t *testing.T, tl *testLedger) {
	c := newCore(t)
	sent := tl.seed(ledger.StateSent, "", 24*time.Hour)
	s, err := Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{MinAge: 0, StaleSent: 0, Now: time.Now()})
	assert.NilError(t, err)
	assert.Equal(t, s.Count("selected"), 0)
	assert.Equal(t, tl.row(sent).State, ledger.StateSent)
}

func TestResolveOnlyGUIDs(t *testing.T) {
	eachStore(t, testResolveOnlyGUIDs)
}

// --guid: only the rows named are settled, by the same rules.
func testResolveOnlyGUIDs(t *testing.T, tl *testLedger) {
	c := newCore(t)
	named := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
	other := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
	s, err := Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{MinAge: time.Minute, Now: time.Now(), GUIDs: []string{named}})
	assert.NilError(t, err)
	assert.Equal(t, s.Count("selected"), 1)
	assert.Equal(t, tl.row(named).State, ledger.StateFailed)
	assert.Equal(t, tl.row(other).State, ledger.StateUnknown)
}

func TestResolveLeavesRowsWhenCoreUnreachable(t *testing.T) {
	eachStore(t, testResolveLeavesRowsWhenCoreUnreachable)
}

func testResolveLeavesRowsWhenCoreUnreachable(t *testing.T, tl *testLedger) {
	const n = 5
	var guids []string
	before := map[string]ledger.Row{}
	for range n {
		g := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
		guids = append(guids, g)
		before[g] = tl.row(g)
	}
	s, err := Resolve(context.Background(), tl.l, closedCore(t), ResolveConfig{MinAge: time.Minute, Now: time.Now()})
	assert.ErrorIs(t, err, ErrCoreUnreachable)
	// The run stops at the first row it could not settle: the first row
	// goes alone (the pacer's slow start), so the rest are not tried.
	assert.Equal(t, s.Count("unreachable"), 1, s.String())
	assert.Equal(t, s.Count("not_tried"), n-1, s.String())
	for _, g := range guids {
		assert.DeepEqual(t, tl.row(g), before[g])
	}
	g := guids[0]

	// A core that answers, but not 200 or 404, leaves the row too.
	c := newCore(t)
	c.failLookups.Store(true)
	_, err = Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{MinAge: time.Minute, Now: time.Now()})
	assert.ErrorIs(t, err, ErrCoreUnreachable)
	assert.Equal(t, tl.row(g).State, ledger.StateUnknown)
}

func TestReprocessSelection(t *testing.T) {
	eachStore(t, testReprocessSelection)
}

func testReprocessSelection(t *testing.T, tl *testLedger) {
	c := newCore(t)
	resend := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
	atLimit := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
	tl.setAttempts(atLimit, 3)
	belowLimit := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
	tl.setAttempts(belowLimit, 2)
	otherCode := tl.seed(ledger.StateFailed, generated.RspHTTP500, time.Hour)
	unknown := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)

	var out bytes.Buffer
	s, err := Reprocess(context.Background(), tl.l, c.client(t), ReprocessConfig{MaxAttempts: 3, DryRun: true, Now: time.Now(), Out: &out})
	assert.NilError(t, err)
	assert.Equal(t, s.String(), "reprocess (dry run): selected=2 skipped=0 not_tried=0 exhausted=1")
	assert.Equal(t, strings.Count(out.String(), "would resend"), 2)
	assert.Equal(t, c.posts.Load(), int64(0), "a dry run sends nothing")
	assert.Equal(t, tl.row(resend).State, ledger.StateFailed)

	s, err = Reprocess(context.Background(), tl.l, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
	assert.NilError(t, err)
	assert.Equal(t, s.String(), "reprocess: selected=2 skipped=0 not_tried=0 exhausted=1 0000=2")
	assert.Equal(t, c.posts.Load(), int64(2))
	r := tl.row(resend)
	assert.Equal(t, r.State, ledger.StateDone)
	assert.Equal(t, r.Attempts, 2)
	assert.Equal(t, tl.row(belowLimit).Attempts, 3)
	assert.Equal(t, c.sim.PostCount(resend), 1)
	// The stored answer is the relay's: a 0000 frame with the layout's body.
	var h generated.Header
	assert.NilError(t, h.Decode(string(r.Response[:generated.HeaderLen])))
	assert.Equal(t, generated.RspCode(h.RspCode), generated.RspHTTP200)
	assert.Equal(t, len(r.Response), generated.HeaderLen+generated.BKTR0001ResponseLen)

	// Untouched: attempts at the limit, a FAILED row with another code, UNKNOWN.
	assert.Equal(t, tl.row(atLimit).Attempts, 3)
	assert.Equal(t, tl.row(atLimit).State, ledger.StateFailed)
	assert.Equal(t, tl.row(otherCode).State, ledger.StateFailed)
	assert.Equal(t, tl.row(unknown).State, ledger.StateUnknown)
	assert.Equal(t, c.sim.PostCount(unknown), 0, "UNKNOWN is never resent")
}

// TestReprocessStopsAtAnUnreachableCore: with the core unreachable for the
// resend (it answered the row's lookup, then went down), the run spends
// one attempt in all (the first row's), leaves every other row untouched,
// exits with ErrCoreUnreachable and says exactly that. Rows that have run
// out of attempts are counted so that someone decides about them. (A core
// unreachable for the lookup itself: TestReprocessLookupUnreachable.)
func TestReprocessStopsAtAnUnreachableCore(t *testing.T) {
	eachStore(t, testReprocessStopsAtAnUnreachableCore)
}

func testReprocessStopsAtAnUnreachableCore(t *testing.T, tl *testLedger) {
	const rows = 300 // more than one ledger.Scan page
	guids := make([]string, rows)
	for i := range guids {
		guids[i] = tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour+time.Duration(rows-i)*time.Second)
	}
	spent := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
	tl.setAttempts(spent, 5)

	s, err := Reprocess(context.Background(), tl.l, downAfterLookup(t), ReprocessConfig{MaxAttempts: 5, Now: time.Now()})
	assert.ErrorIs(t, err, ErrCoreUnreachable)
	assert.Equal(t, s.String(), "reprocess: selected=1 skipped=0 not_tried=299 exhausted=1 E902=1")
	first := guids[0] // the oldest is selected first
	assert.ErrorContains(t, err, "the core could not be reached: stopped at "+first+", whose resend could not reach it (it spent attempt 2 of at most 5 and stays FAILED E902); 299 other selected rows were not tried and are unchanged")
	r := tl.row(first)
	assert.Equal(t, r.State, ledger.StateFailed, "not sent: stays FAILED for the next run")
	assert.Equal(t, r.RspCode, string(generated.RspConnectFail))
	assert.Equal(t, r.Attempts, 2)
	attempts := 0
	for _, g := range guids {
		attempts += tl.row(g).Attempts
	}
	assert.Equal(t, attempts, rows+1, "one attempt spent in all")

	// Runs through a long outage never drain the selection: each spends
	// one attempt, on the oldest row (the first claimed: its place does
	// not move), which alone probes the core, until it has none left.
	for range 3 {
		_, err = Reprocess(context.Background(), tl.l, downAfterLookup(t), ReprocessConfig{MaxAttempts: 5, Now: time.Now()})
		assert.ErrorIs(t, err, ErrCoreUnreachable)
	}
	attempts = 0
	for _, g := range guids {
		attempts += tl.row(g).Attempts
	}
	assert.Equal(t, attempts, rows+4, "one attempt spent per run")
	assert.Equal(t, tl.row(first).Attempts, 5)
	n, err := tl.l.Count(context.Background(), ledger.Filter{States: []ledger.State{ledger.StateFailed}, MaxAttempts: 5})
	assert.NilError(t, err)
	assert.Equal(t, n, rows-1)
}

// TestReprocessCountsExhaustedRows: a row whose resend fails again on its
// last attempt is counted exhausted in the same run.
func TestReprocessCountsExhaustedRows(t *testing.T) {
	eachStore(t, testReprocessCountsExhaustedRows)
}

func testReprocessCountsExhaustedRows(t *testing.T, tl *testLedger) {
	g := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
	tl.setAttempts(g, 4)
	s, err := Reprocess(context.Background(), tl.l, downAfterLookup(t), ReprocessConfig{MaxAttempts: 5, Now: time.Now()})
	assert.ErrorIs(t, err, ErrCoreUnreachable)
	assert.Equal(t, s.Count("exhausted"), 1)
	assert.Equal(t, tl.row(g).Attempts, 5)
}

func TestReprocessSkipsRowTakenByRelay(t *testing.T) {
	eachStore(t, testReprocessSkipsRowTakenByRelay)
}

func testReprocessSkipsRowTakenByRelay(t *testing.T, tl *testLedger) {
	c := newCore(t)
	g := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
	// The channel retried first: the relay re-claimed the row.
	h, frame := transferFrame(t, g, "seed", 1000)
	claim, err := tl.l.Claim(context.Background(), ledger.Request{GUID: g, TxCode: h.TxCode, Frame: frame, Body: frame[generated.HeaderLen:]})
	assert.NilError(t, err)
	assert.Equal(t, claim.Outcome, ledger.Owned)
	// reprocess selected the row before that and now tries to re-claim it.
	row := tl.row(g)
	row.State = ledger.StateFailed
	outcome, err := resendRow(context.Background(), newResolveState(tl.l, c.client(t), nil, time.Now()), row, ReprocessConfig{MaxAttempts: 5, Now: time.Now()})
	assert.NilError(t, err)
	assert.Equal(t, outcome, "skipped")
	assert.Equal(t, c.posts.Load(), int64(0))
}

// TestResolveByEachTransactionsOwnRule: every row is settled by the rule
// its own transaction declares. A read (lookup none) becomes FAILED E902
// with no core call at all; a transfer is looked up at its own path, as
// before; a row of a TX_CODE this binary does not know is left unchanged
// and counted, never guessed at.
func TestResolveByEachTransactionsOwnRule(t *testing.T) {
	eachStore(t, testResolveByEachTransactionsOwnRule)
}

func testResolveByEachTransactionsOwnRule(t *testing.T, tl *testLedger) {
	var calls []string
	var mu sync.Mutex
	sim := coresim.New(coresim.Config{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, r.Method+" "+r.URL.Path)
		mu.Unlock()
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	client, err := corecall.New(corecall.Config{BaseURL: srv.URL, Timeout: 2 * time.Second})
	assert.NilError(t, err)

	inquiry := testkit.GUID()
	rich := map[string]string{"acct": "11002003004005"}
	iframe := testkit.Frame(t, testkit.ReadTx(), inquiry, rich)
	tl.seedFrame(headerOf(t, iframe), iframe, ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
	staleInquiry := testkit.GUID()
	iframe = testkit.Frame(t, testkit.ReadTx(), staleInquiry, rich)
	tl.seedFrame(headerOf(t, iframe), iframe, ledger.StateSent, "", time.Hour)

	transfer := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)

	// A row written by a newer relay that knows a transaction this binary
	// does not: its frame is well formed, its TX_CODE unregistered.
	newer := testkit.GUID()
	nh, nframe := transferFrame(t, newer, "newer", 1000)
	copy(nframe[4:12], "BKZZ0001")
	nh.TxCode = "BKZZ0001"
	tl.seedFrame(nh, nframe, ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
	before := tl.row(newer)

	var log bytes.Buffer
	s, err := Resolve(context.Background(), tl.l, client, ResolveConfig{MinAge: time.Minute, StaleSent: time.Minute, Now: time.Now(),
		Log: slog.New(slog.NewTextHandler(&log, nil))})
	assert.NilError(t, err, "a row left for a newer binary is handled by the rules: exit 0")
	assert.Equal(t, s.String(), "resolve: selected=4 done=0 failed=3 unreachable=0 skipped=0 unknown_tx=1 undecodable=0")

	// The transfer's own lookup, then the guard's check of its 404 (the
	// ledger holds no posted transfer: a new GUID's lookup and that path
	// made wrong); the reads and the unknown TX_CODE call nothing.
	mu.Lock()
	assert.Equal(t, len(calls), 3, "%q", calls)
	assert.Equal(t, calls[0], "GET /v1/transfers/"+transfer)
	assert.Equal(t, calls[2], calls[1]+probeSuffix)
	mu.Unlock()
	for _, g := range []string{inquiry, staleInquiry, transfer} {
		row := tl.row(g)
		assert.Equal(t, row.State, ledger.StateFailed, g)
		assert.Equal(t, row.RspCode, string(generated.RspConnectFail))
		var h generated.Header
		assert.NilError(t, h.Decode(string(row.Response)))
		assert.Equal(t, h.GUID, g)
		assert.Equal(t, h.TxCode, tl.row(g).TxCode)
	}
	assert.DeepEqual(t, tl.row(newer), before)
	assert.Assert(t, is.Contains(log.String(), "guid="+newer))
	assert.Assert(t, is.Contains(log.String(), "row unchanged"))
}

// TestUnusableLookupAnswerHoldsOnlyItsRow: a core that answers one row's
// lookup whole but with nothing that settles it (a 500, a 400, a 200 about
// another GUID, a body that is not JSON) is there: resolve and reprocess
// leave that row unchanged (reprocess sends nothing for it) and go on with
// the rest, oldest first, so one row cannot hold an outage's rows behind
// it; the run ends as for rows the core could not be reached for (exit 1),
// naming the row.
func TestUnusableLookupAnswerHoldsOnlyItsRow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request, c *core, other string)
	}{
		{"500", func(w http.ResponseWriter, _ *http.Request, _ *core, _ string) {
			http.Error(w, "oops", http.StatusInternalServerError)
		}},
		{"400", func(w http.ResponseWriter, _ *http.Request, _ *core, _ string) {
			http.Error(w, "bad", http.StatusBadRequest)
		}},
		{"not JSON", func(w http.ResponseWriter, _ *http.Request, _ *core, _ string) { _, _ = w.Write([]byte("<html>")) }},
		{"200 about another GUID", func(w http.ResponseWriter, r *http.Request, c *core, other string) {
			// The simulator's own answer to the lookup of a posted
			// transfer, asked about another GUID.
			odd := r.Header.Get("X-GUID")
			r.URL.Path = strings.ReplaceAll(r.URL.Path, odd, other)
			r.Header.Set("X-GUID", other)
			c.sim.ServeHTTP(w, r)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, tl *testLedger) {
				ctx := context.Background()
				c := newCore(t)
				// The odd row is the oldest: the first one either run takes.
				odd := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, 3*time.Hour)
				oddFailed := tl.seed(ledger.StateFailed, generated.RspConnectFail, 3*time.Hour)
				var unknown, failed []string
				for range 4 {
					unknown = append(unknown, tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour))
					failed = append(failed, tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour))
				}
				c.post(t, tl, unknown[0])
				before := map[string]ledger.Row{odd: tl.row(odd), oddFailed: tl.row(oddFailed)}
				serve := func(w http.ResponseWriter, r *http.Request) bool {
					g := r.Header.Get("X-GUID")
					if r.Method != http.MethodGet || (g != odd && g != oddFailed) {
						return false
					}
					tc.answer(w, r, c, unknown[0])
					return true
				}
				c.serve.Store(&serve)

				posts := c.posts.Load()
				s, err := Reprocess(ctx, tl.l, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
				assert.ErrorIs(t, err, ErrCoreUnreachable)
				assert.ErrorContains(t, err, oddFailed)
				assert.Equal(t, s.Count("unreachable"), 1, s.String())
				assert.Equal(t, s.Count(string(generated.RspHTTP200)), 4, s.String())
				assert.Equal(t, s.Count("not_tried"), 0, s.String())
				assert.DeepEqual(t, tl.row(oddFailed), before[oddFailed])
				assert.Equal(t, c.sim.PostCount(oddFailed), 0)
				for _, g := range failed {
					assert.Equal(t, c.sim.PostCount(g), 1, g)
				}
				assert.Equal(t, c.posts.Load()-posts, int64(len(failed)))

				s, err = Resolve(ctx, tl.l, c.client(t), ResolveConfig{MinAge: time.Minute, Now: time.Now(), GUIDs: append([]string{odd}, unknown...)})
				assert.ErrorIs(t, err, ErrCoreUnreachable)
				assert.ErrorContains(t, err, "for 1 rows, which are unchanged")
				assert.ErrorContains(t, err, odd)
				assert.Equal(t, s.String(), "resolve: selected=5 done=1 failed=3 unreachable=1 skipped=0 unknown_tx=0 undecodable=0")
				assert.DeepEqual(t, tl.row(odd), before[odd])
				for _, g := range unknown {
					assert.Assert(t, tl.row(g).State != ledger.StateUnknown, g)
				}
			})
		})
	}
}
