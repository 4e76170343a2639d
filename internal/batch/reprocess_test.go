package batch

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/corecall"
	"lhrelay/internal/faultproxy"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/outcome"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

// downAfterLookup is a client of a fresh core that answers reprocess's
// lookup of the first row and the guard's checks of its 404, and then
// refuses every connection: a core that went down between the lookup and
// the resend, which the resend finds E902.
func downAfterLookup(t *testing.T) *corecall.Client {
	c := newCore(t)
	var down atomic.Bool
	before := func(w http.ResponseWriter, r *http.Request) {
		// Each request on a connection of its own, so that the resend
		// must dial.
		w.Header().Set("Connection", "close")
		if strings.HasSuffix(r.URL.Path, probeSuffix) {
			down.Store(true) // the guard's last check: the lookup is done
		}
	}
	c.before.Store(&before)
	closed := testkit.ClosedAddr(t)
	var d net.Dialer
	cl, err := corecall.New(corecall.Config{BaseURL: c.srv.URL, Timeout: 2 * time.Second,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if down.Load() {
				addr = closed
			}
			return d.DialContext(ctx, network, addr)
		}})
	assert.NilError(t, err)
	return cl
}

// postedBody makes the core post guid's stored request, as the relay's call
// would, and returns the response body the core's answer encodes to.
func (c *core) postedBody(t *testing.T, tl *testLedger, guid string) []byte {
	r, err := wire.ParseRequest(tl.row(guid).Request)
	assert.NilError(t, err)
	res := c.client(t).Call(context.Background(), r.Tx, guid, r.Body)
	assert.Equal(t, res.Source, generated.SourceHTTP200, "%v", res.Err)
	b, err := res.Body.AppendTo(nil)
	assert.NilError(t, err)
	return b
}

// TestReprocessSettlesWhatTheCorePosted: a FAILED/E902 row whose transfer
// the core did post (a lookup settled it too early, while its call was
// under way, and the relay died before recording the core's late 200) is
// not sent again: reprocess looks it up first and settles it DONE/0000
// with the core's answer, keeping its attempts, and the core's POSTs for
// it stay at one. A row the core never posted is sent, once. A dry run
// asks the core nothing.
func TestReprocessSettlesWhatTheCorePosted(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		ctx := context.Background()
		c := newCore(t)
		posted := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
		never := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
		want := c.postedBody(t, tl, posted)
		requests := c.requests.Load()

		var out bytes.Buffer
		s, err := Reprocess(ctx, tl.l, c.client(t), ReprocessConfig{MaxAttempts: 3, DryRun: true, Now: time.Now(), Out: &out})
		assert.NilError(t, err)
		assert.Equal(t, s.String(), "reprocess (dry run): selected=2 skipped=0 not_tried=0 exhausted=0")
		assert.Equal(t, strings.Count(out.String(), "would resend"), 2)
		assert.Equal(t, c.requests.Load(), requests, "a dry run asks the core nothing")

		reprocessor := tl.open(t, "reprocess")
		s, err = Reprocess(ctx, reprocessor, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
		assert.NilError(t, err)
		assert.Equal(t, s.String(), "reprocess: selected=2 skipped=0 not_tried=0 exhausted=0 posted_already=1 0000=1")

		r := tl.row(posted)
		assert.Equal(t, r.State, ledger.StateDone)
		assert.Equal(t, r.RspCode, string(generated.RspHTTP200))
		assert.Equal(t, r.Attempts, 1, "not re-claimed: not sent")
		assert.Equal(t, c.sim.PostCount(posted), 1)
		var h generated.Header
		assert.NilError(t, h.Decode(string(r.Response[:generated.HeaderLen])))
		assert.Equal(t, h.GUID, posted)
		assert.Equal(t, h.Flag, generated.FlagResponse)
		assert.Equal(t, generated.RspCode(h.RspCode), generated.RspHTTP200)
		assert.DeepEqual(t, r.Response[generated.HeaderLen:], want)

		e := lastEntry(t, tl.l, posted)
		assert.Check(t, e.StateBefore == ledger.StateFailed && e.RspBefore == string(generated.RspConnectFail))
		assert.Check(t, e.StateAfter == ledger.StateDone && e.RspAfter == string(generated.RspHTTP200))
		assert.Check(t, is.Equal(e.Reason, "reprocess: lookup 200, posted already: not sent again"))
		assert.Check(t, is.Equal(e.HTTPStatus, http.StatusOK))
		assert.Check(t, is.Equal(e.Attempts, 1))
		assert.Check(t, is.Equal(e.Command, "reprocess"))

		n := tl.row(never)
		assert.Equal(t, n.State, ledger.StateDone)
		assert.Equal(t, n.Attempts, 2)
		assert.Equal(t, c.sim.PostCount(never), 1)

		// The next run finds nothing: the posted row is DONE.
		s, err = Reprocess(ctx, tl.l, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
		assert.NilError(t, err)
		assert.Equal(t, s.Count("selected"), 0)
		assert.Equal(t, c.sim.PostCount(posted), 1)
		_, err = tl.l.Audit(ctx)
		assert.NilError(t, err)
	})
}

// TestReprocessLookupUnreachable: when the lookup before a resend gets no
// usable answer (nothing listens, the core answers 503) or a 404 the guard
// cannot trust (a --core with a wrong path), the row is not sent and is
// unchanged, the run stops there (the rest not tried) and exits as for an
// unreachable core, saying the lookup could not tell.
func TestReprocessLookupUnreachable(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		ctx := context.Background()
		c := newCore(t)
		first := tl.seed(ledger.StateFailed, generated.RspConnectFail, 2*time.Hour)
		second := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
		before := map[string]ledger.Row{first: tl.row(first), second: tl.row(second)}
		unchanged := func() {
			t.Helper()
			for g, row := range before {
				assert.DeepEqual(t, tl.row(g), row)
			}
			assert.Equal(t, c.posts.Load(), int64(0))
		}

		s, err := Reprocess(ctx, tl.l, closedCore(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
		assert.ErrorIs(t, err, ErrCoreUnreachable)
		assert.ErrorContains(t, err, "the core could not be reached: stopped at "+first+", whose lookup could not tell whether the core posted it, so it was not sent and is unchanged")
		assert.ErrorContains(t, err, "1 other selected rows were not tried and are unchanged")
		assert.Equal(t, s.String(), "reprocess: selected=1 skipped=0 not_tried=1 exhausted=0 unreachable=1")
		unchanged()

		c.failLookups.Store(true)
		s, err = Reprocess(ctx, tl.l, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
		assert.ErrorIs(t, err, ErrCoreUnreachable)
		assert.ErrorContains(t, err, "core answered HTTP 503")
		assert.Equal(t, s.Count("unreachable"), 1)
		unchanged()
		c.failLookups.Store(false)

		s, err = Reprocess(ctx, tl.l, c.clientAt(t, "/api"), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
		assert.ErrorIs(t, err, ErrCoreUnreachable)
		assert.ErrorIs(t, err, ErrLookupUnverified)
		assert.ErrorContains(t, err, "check that --core "+c.srv.URL+"/api is the core's base URL")
		assert.Equal(t, s.Count(OutcomeUnverified), 1)
		unchanged()

		// With the core back, both are sent, once each.
		s, err = Reprocess(ctx, tl.l, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
		assert.NilError(t, err)
		assert.Equal(t, s.Count(string(generated.RspHTTP200)), 2)
		assert.Equal(t, c.sim.PostCount(first), 1)
		assert.Equal(t, c.sim.PostCount(second), 1)
	})
}

// TestReprocessReclaimedAfterTheLookup: a row the relay re-claims (the
// channel's retry) between reprocess's lookup and its transition is left
// to the relay and counted skipped; reprocess sends nothing.
func TestReprocessReclaimedAfterTheLookup(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		ctx := context.Background()
		c := newCore(t)
		g := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
		c.postedBody(t, tl, g)
		h, frame := transferFrame(t, g, "seed", 1000)
		var once sync.Once
		before := func(_ http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && r.Header.Get("X-GUID") == g {
				once.Do(func() {
					claim, err := tl.l.Claim(ctx, ledger.Request{GUID: g, TxCode: h.TxCode, Frame: frame, Body: frame[generated.HeaderLen:]})
					assert.Check(t, err)
					assert.Check(t, is.Equal(claim.Outcome, ledger.Owned))
				})
			}
		}
		c.before.Store(&before)

		s, err := Reprocess(ctx, tl.l, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
		assert.NilError(t, err)
		assert.Equal(t, s.String(), "reprocess: selected=1 skipped=1 not_tried=0 exhausted=0")
		r := tl.row(g)
		assert.Equal(t, r.State, ledger.StateSent, "the relay's claim")
		assert.Equal(t, r.Attempts, 2)
		assert.Equal(t, c.sim.PostCount(g), 1)
	})
}

// TestReprocessSendsAReadWithoutLookup: a transaction whose layout
// declares no lookup (a read) is sent again as before, with no lookup
// first: sending a read again is harmless.
func TestReprocessSendsAReadWithoutLookup(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		c := newCore(t)
		var mu sync.Mutex
		var calls []string
		before := func(_ http.ResponseWriter, r *http.Request) {
			mu.Lock()
			calls = append(calls, r.Method+" "+r.URL.Path)
			mu.Unlock()
		}
		c.before.Store(&before)
		g := testkit.GUID()
		frame := testkit.Frame(t, testkit.ReadTx(), g, map[string]string{"acct": "11002003004005"})
		tl.seedFrame(headerOf(t, frame), frame, ledger.StateFailed, generated.RspConnectFail, time.Hour)
		r, err := wire.ParseRequest(frame)
		assert.NilError(t, err)
		assert.Equal(t, r.Tx.Settle, generated.SettleAsNotPosted)
		path, err := r.Body.CorePath()
		assert.NilError(t, err)

		s, err := Reprocess(context.Background(), tl.l, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
		assert.NilError(t, err)
		assert.Equal(t, s.String(), "reprocess: selected=1 skipped=0 not_tried=0 exhausted=0 0000=1")
		mu.Lock()
		assert.DeepEqual(t, calls, []string{http.MethodGet + " " + path})
		mu.Unlock()
		row := tl.row(g)
		assert.Equal(t, row.State, ledger.StateDone)
		assert.Equal(t, row.Attempts, 2)
	})
}

// TestReprocessLeavesARowTakenSince: a row the relay re-claimed after
// reprocess selected it (its call may be at the core right now) is
// skipped: not sent, and left as the relay's claim made it. Then the
// same after the relay's resend came back FAILED/E902: the row looks as
// selected but for its attempts, and is the relay's too.
func TestReprocessLeavesARowTakenSince(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		c := newCore(t)
		g := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
		selected := tl.row(g)
		h, frame := transferFrame(t, g, "seed", 1000)
		claim, err := tl.l.Claim(context.Background(), ledger.Request{GUID: g, TxCode: h.TxCode, Frame: frame, Body: frame[generated.HeaderLen:]})
		assert.NilError(t, err)
		assert.Equal(t, claim.Outcome, ledger.Owned)
		st := newResolveState(tl.l, c.client(t), nil, time.Now())
		cfg := ReprocessConfig{MaxAttempts: 5, Now: time.Now()}

		got, err := resendRow(context.Background(), st, selected, cfg)
		assert.NilError(t, err)
		assert.Equal(t, got, "skipped")
		assert.Equal(t, c.posts.Load(), int64(0), "not sent")
		row := tl.row(g)
		assert.Equal(t, row.State, ledger.StateSent)
		assert.Equal(t, row.Attempts, claim.Attempts)

		assert.NilError(t, tl.l.Finish(context.Background(), g, claim.Attempts, outcome.Answer(nil, &h, generated.SourceConnectFail, ledger.Why{Reason: "test: no connection"}, time.Now())))
		got, err = resendRow(context.Background(), st, selected, cfg)
		assert.NilError(t, err)
		assert.Equal(t, got, "skipped")
		assert.Equal(t, c.posts.Load(), int64(0), "not sent")
		row = tl.row(g)
		assert.Equal(t, row.State, ledger.StateFailed)
		assert.Equal(t, row.Attempts, claim.Attempts)
	})
}

// proxiedLedger is a fresh PostgreSQL ledger, and the same ledger reached
// through a fault proxy, to lose a COMMIT or its answer (as the relay's
// and the ledger's tests of unconfirmed claims do).
func proxiedLedger(t *testing.T) (*testLedger, *ledger.Ledger, *faultproxy.Proxy) {
	u := pgtest.URL(t)
	tl := newTestLedger(t, u)
	pu, err := url.Parse(u)
	assert.NilError(t, err)
	p, err := faultproxy.Start(pu.Host)
	assert.NilError(t, err)
	t.Cleanup(func() { p.Close() })
	l, err := ledger.OpenExisting(strings.Replace(u, pu.Host, p.Addr(), 1), ledger.WithActor(ledger.NewActor("reprocess")))
	assert.NilError(t, err)
	t.Cleanup(func() { l.Close() })
	return tl, l, p
}

// TestReprocessUnconfirmedReclaim: reprocess's re-claim commits, but the
// database's answer to its COMMIT is lost. Nothing is sent (it cannot know
// it owns the row), and, as the relay does with an unconfirmed claim (SPEC
// 6), the row, found SENT with that re-claim's attempts, is made
// FAILED/E902 as soon as the database answers again, instead of staying
// SENT until resolve --stale-sent: the next run sends it, once. The run
// ends with the ledger's error (exit 2), naming the row.
func TestReprocessUnconfirmedReclaim(t *testing.T) {
	tl, l, proxy := proxiedLedger(t)
	ctx := context.Background()
	c := newCore(t)
	c.answer404(testkit.Fixed(`{"error":"no such transfer"}`), testkit.Fixed(`{"error":"no such path"}`))
	g := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)

	// The re-claim is the run's first write.
	proxy.CutAfterCommits(1)
	_, err := Reprocess(ctx, l, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
	assert.Equal(t, proxy.CommitsCut(), 1)
	assert.ErrorIs(t, err, ledger.ErrUnconfirmed)
	assert.Assert(t, !errors.Is(err, ErrCoreUnreachable), "the ledger broke the run off: exit 2")
	assert.ErrorContains(t, err, g)
	assert.ErrorContains(t, err, "not sent: its row was found committed and made FAILED E902 (attempt 2 spent)")
	assert.Equal(t, c.posts.Load(), int64(0), "nothing sent")
	r := tl.row(g)
	assert.Equal(t, r.State, ledger.StateFailed)
	assert.Equal(t, r.RspCode, string(generated.RspConnectFail))
	assert.Equal(t, r.Attempts, 2)
	e := lastEntry(t, tl.l, g)
	assert.Check(t, e.StateBefore == ledger.StateSent && e.StateAfter == ledger.StateFailed, "%+v", e)
	assert.Check(t, is.Contains(e.Reason, "re-claim's commit not confirmed"))

	s, err := Reprocess(ctx, l, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
	assert.NilError(t, err)
	assert.Equal(t, s.Count(string(generated.RspHTTP200)), 1)
	assert.Equal(t, c.sim.PostCount(g), 1)
	assert.Equal(t, tl.row(g).Attempts, 3)
	_, err = tl.l.Audit(ctx)
	assert.NilError(t, err)
}

// TestReprocessReclaimNeverLanded: the re-claim's COMMIT never reaches the
// database: the row is FAILED as it was, attempts unchanged, nothing is
// sent, and the run says there was nothing to undo.
func TestReprocessReclaimNeverLanded(t *testing.T) {
	tl, l, proxy := proxiedLedger(t)
	ctx := context.Background()
	c := newCore(t)
	c.answer404(testkit.Fixed(`{"error":"no such transfer"}`), testkit.Fixed(`{"error":"no such path"}`))
	g := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
	before := tl.row(g)

	proxy.DropCommits(1)
	_, err := Reprocess(ctx, l, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
	assert.Equal(t, proxy.CommitsDropped(), 1)
	assert.ErrorIs(t, err, ledger.ErrUnconfirmed)
	assert.ErrorContains(t, err, "not sent: the re-claim did not land")
	assert.Equal(t, c.posts.Load(), int64(0))
	assert.DeepEqual(t, tl.row(g), before)
}
