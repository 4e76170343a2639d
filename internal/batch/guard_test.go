package batch

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

// TestResolveWrongPathNewLedger: a ledger holding no posted transfer, and
// resolve given a --core with a wrong path: every lookup answers 404, and
// the core answers a new GUID's lookup as it answers a path it does not
// serve, so no 404 is trusted. The posted transfer stays UNKNOWN (so
// neither reprocess nor a channel's retry can send it again), the run ends
// with an error naming the URL, and once --core is right the rows settle
// by the usual rules: the core posted each GUID at most once.
func TestResolveWrongPathNewLedger(t *testing.T) {
	eachStore(t, testResolveWrongPathNewLedger)
}

func testResolveWrongPathNewLedger(t *testing.T, tl *testLedger) {
	c := newCore(t)
	posted := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
	neverPosted := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
	c.post(t, tl, posted)
	before := map[string]ledger.Row{posted: tl.row(posted), neverPosted: tl.row(neverPosted)}

	s, err := Resolve(context.Background(), tl.l, c.clientAt(t, "/api"), ResolveConfig{MinAge: time.Minute, Now: time.Now()})
	assert.ErrorIs(t, err, ErrLookupUnverified)
	assert.ErrorIs(t, err, ErrCoreUnreachable, "exit status 1")
	assert.ErrorContains(t, err, "check that --core "+c.srv.URL+"/api is the core's base URL (GET "+c.srv.URL+"/api/v1/transfers/")
	assert.Equal(t, s.String(), "resolve: selected=2 done=0 failed=0 unreachable=0 skipped=0 unknown_tx=0 undecodable=0 unverified=2")
	for g, row := range before {
		assert.DeepEqual(t, tl.row(g), row)
	}

	// Reprocess finds nothing to send: the rows are UNKNOWN.
	s, err = Reprocess(context.Background(), tl.l, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
	assert.NilError(t, err)
	assert.Equal(t, s.Count("selected"), 0)

	// The right URL: 200 → DONE, 404 → FAILED/E902.
	s, err = Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{MinAge: 0, Now: time.Now()})
	assert.NilError(t, err)
	assert.Equal(t, s.String(), "resolve: selected=2 done=1 failed=1 unreachable=0 skipped=0 unknown_tx=0 undecodable=0")
	assert.Equal(t, tl.row(posted).State, ledger.StateDone)
	assert.Equal(t, tl.row(neverPosted).RspCode, string(generated.RspConnectFail))
	assert.Equal(t, c.sim.PostCount(posted), 1)
	assert.Equal(t, c.sim.PostCount(neverPosted), 0)
}

// TestResolveWrongPathCheckedAgainstPosted: with a posted transfer in the
// ledger (DONE/0000), the guard looks it up: at the wrong path the core
// denies it and answers a new GUID's lookup as a path it does not serve,
// so no 404 settles anything, and the refusal names the denied row; at the
// right one it confirms it, and a 404 settles the row never posted.
func TestResolveWrongPathCheckedAgainstPosted(t *testing.T) {
	eachStore(t, testResolveWrongPathCheckedAgainstPosted)
}

func testResolveWrongPathCheckedAgainstPosted(t *testing.T, tl *testLedger) {
	c := newCore(t)
	done := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
	c.post(t, tl, done)
	_, err := Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{GUIDs: []string{done}, Now: time.Now()})
	assert.NilError(t, err)
	assert.Equal(t, tl.row(done).State, ledger.StateDone)

	neverPosted := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
	s, err := Resolve(context.Background(), tl.l, c.clientAt(t, "/v2"), ResolveConfig{MinAge: time.Minute, Now: time.Now()})
	assert.ErrorIs(t, err, ErrLookupUnverified)
	assert.ErrorContains(t, err, "the core answered 404 to the lookup of "+done+", which the ledger holds as posted")
	assert.ErrorContains(t, err, "--core "+c.srv.URL+"/v2")
	assert.Equal(t, s.Count(OutcomeUnverified), 1)
	assert.Equal(t, tl.row(neverPosted).State, ledger.StateUnknown)

	// A core that confirms the posted transfer is trusted: its 404 settles.
	guard := &LookupGuard{TTL: time.Hour}
	s, err = Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{MinAge: time.Minute, Now: time.Now(), Guard: guard})
	assert.NilError(t, err)
	assert.Equal(t, s.Count("failed"), 1)
	assert.Equal(t, tl.row(neverPosted).State, ledger.StateFailed)
	assert.Assert(t, guard.trustedNow(txOf(t, tl, done).Code))
}

// TestLookupGuardSameAnswers: a core that answers everything it does not
// serve exactly as it answers a lookup's 404 (same status, same media type,
// same body) is distrusted; the same core reached at its root is not.
func TestLookupGuardSameAnswers(t *testing.T) {
	eachStore(t, testLookupGuardSameAnswers)
}

func testLookupGuardSameAnswers(t *testing.T, tl *testLedger) {
	c := newCore(t)
	g := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
	// The simulator's 404 for a lookup is JSON and for an unknown path
	// text: a client at the root sees them differ, one below /api does not.
	var guard LookupGuard
	err := guard.check(context.Background(), tl.l, c.clientAt(t, "/api"), txOf(t, tl, g), bodyOf(t, tl, g), discard)
	var ue *UnverifiedError
	assert.Assert(t, errors.As(err, &ue), "%v", err)
	assert.Assert(t, strings.HasPrefix(ue.Path, "/v1/transfers/"), "the lookup's own path: %s", ue.Path)
	assert.Equal(t, ue.Core, c.srv.URL+"/api")
	assert.ErrorContains(t, err, "exactly as it answers a path it does not serve (HTTP 404 \"text/plain\", body \"404 page not found\\n\" once the path and GUID are masked)")
	assert.Assert(t, !guard.trustedNow(txOf(t, tl, g).Code), "a refusal is not remembered")
	assert.NilError(t, guard.check(context.Background(), tl.l, c.client(t), txOf(t, tl, g), bodyOf(t, tl, g), discard))
	assert.Assert(t, guard.trustedNow(txOf(t, tl, g).Code))
}

// txOf is the transaction of guid's stored request.
func txOf(t *testing.T, tl *testLedger, guid string) *generated.Transaction {
	r, err := wire.ParseRequest(tl.row(guid).Request)
	assert.NilError(t, err)
	return r.Tx
}

// bodyOf is guid's stored request body.
func bodyOf(t *testing.T, tl *testLedger, guid string) generated.RequestBody {
	r, err := wire.ParseRequest(tl.row(guid).Request)
	assert.NilError(t, err)
	return r.Body
}

// discard is a logger that logs nothing.
var discard = slog.New(slog.DiscardHandler)

// Framework-style 404s: JSON for both, and a different body for an
// unknown transfer and for a path the core does not serve.
const (
	noSuchTransfer = `{"error":"no such transfer"}`
	noSuchPath     = `{"error":"no such path"}`
)

// TestResolveFrameworkNotFoundNewLedger: a core that answers the lookup of
// an unknown transfer 404 {"error":"no such transfer"} and a path it does
// not serve 404 {"error":"no such path"}, both JSON as most web frameworks
// answer, is trusted on a brand-new ledger (no DONE row yet): its 404
// settles a row FAILED/E902, its 200 DONE, and the run exits 0. The
// never-posted row is the older, so it is looked up before any 200.
func TestResolveFrameworkNotFoundNewLedger(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		c := newCore(t)
		c.answer404(testkit.Fixed(noSuchTransfer), testkit.Fixed(noSuchPath))
		never := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, 2*time.Hour)
		posted := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
		c.post(t, tl, posted)

		s, err := Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{MinAge: time.Minute, Now: time.Now()})
		assert.NilError(t, err)
		assert.Equal(t, s.String(), "resolve: selected=2 done=1 failed=1 unreachable=0 skipped=0 unknown_tx=0 undecodable=0")
		assert.Equal(t, tl.row(never).State, ledger.StateFailed)
		assert.Equal(t, tl.row(never).RspCode, string(generated.RspConnectFail))
		assert.Equal(t, tl.row(posted).State, ledger.StateDone)
		assert.Equal(t, tl.row(posted).RspCode, string(generated.RspHTTP200))
		assert.Equal(t, c.sim.PostCount(posted), 1)
	})
}

// TestReprocessFrameworkNotFoundNewLedger: reprocess on a brand-new ledger
// whose core answers framework-style 404s looks the row up, trusts the 404
// and sends it, once.
func TestReprocessFrameworkNotFoundNewLedger(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		c := newCore(t)
		c.answer404(testkit.Fixed(noSuchTransfer), testkit.Fixed(noSuchPath))
		g := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
		s, err := Reprocess(context.Background(), tl.l, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
		assert.NilError(t, err)
		assert.Equal(t, s.String(), "reprocess: selected=1 skipped=0 not_tried=0 exhausted=0 0000=1")
		r := tl.row(g)
		assert.Equal(t, r.State, ledger.StateDone)
		assert.Equal(t, r.Attempts, 2)
		assert.Equal(t, c.sim.PostCount(g), 1)
	})
}

// alikeCores are cores whose lookup of an unknown transfer and whose path
// not served answer alike once the request's path and GUID are masked:
// the same fixed body, a body echoing the path (as it is, and with JSON's
// escaped slashes), a body echoing the GUID.
var alikeCores = []struct {
	name string
	body testkit.NotFound404
}{
	{"same body", testkit.Fixed(`{"error":"not found"}`)},
	{"path echoed", func(r *http.Request) string { return `{"error":"not found","path":"` + r.URL.Path + `"}` }},
	{"path echoed escaped", func(r *http.Request) string {
		return `{"error":"not found","path":"` + strings.ReplaceAll(r.URL.Path, "/", `\/`) + `"}`
	}},
	{"GUID echoed", func(r *http.Request) string { return `{"error":"not found","guid":"` + r.Header.Get("X-Guid") + `"}` }},
}

// TestResolveAlikeAnswersDistrusted: a core answering an unknown
// transfer's lookup exactly as a path it does not serve, with no lookup
// that ever answered 200, is distrusted: the row is unchanged, the run
// exits 1 saying why and naming --trust-lookup-404. With
// --trust-lookup-404 (TrustNotFound) the same 404 settles it FAILED/E902.
func TestResolveAlikeAnswersDistrusted(t *testing.T) {
	for _, tc := range alikeCores {
		t.Run(tc.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, tl *testLedger) {
				c := newCore(t)
				c.answer404(tc.body, tc.body)
				g := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
				before := tl.row(g)

				s, err := Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{MinAge: time.Minute, Now: time.Now()})
				assert.ErrorIs(t, err, ErrLookupUnverified)
				assert.ErrorIs(t, err, ErrCoreUnreachable, "exit status 1")
				assert.ErrorContains(t, err, "the core answers the lookup of a new GUID exactly as it answers a path it does not serve (HTTP 404 \"application/json\"")
				assert.ErrorContains(t, err, "and no lookup of "+before.TxCode+" has answered 200 from it")
				assert.ErrorContains(t, err, "--trust-lookup-404")
				assert.Equal(t, s.Count(OutcomeUnverified), 1)
				assert.DeepEqual(t, tl.row(g), before)

				s, err = Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{MinAge: time.Minute, Now: time.Now(), Guard: &LookupGuard{TrustNotFound: true}})
				assert.NilError(t, err)
				assert.Equal(t, s.Count("failed"), 1)
				assert.Equal(t, tl.row(g).State, ledger.StateFailed)
				assert.Equal(t, tl.row(g).RspCode, string(generated.RspConnectFail))
			})
		})
	}
}

// TestReprocessAlikeAnswersDistrusted: reprocess through the same guard:
// distrusted, the row is not sent and unchanged and the run exits 1;
// with TrustNotFound it is sent.
func TestReprocessAlikeAnswersDistrusted(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		c := newCore(t)
		body := alikeCores[0].body
		c.answer404(body, body)
		g := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
		before := tl.row(g)
		s, err := Reprocess(context.Background(), tl.l, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
		assert.ErrorIs(t, err, ErrLookupUnverified)
		assert.ErrorIs(t, err, ErrCoreUnreachable)
		assert.ErrorContains(t, err, "exactly as it answers a path it does not serve")
		assert.Equal(t, s.Count(OutcomeUnverified), 1)
		assert.DeepEqual(t, tl.row(g), before)
		assert.Equal(t, c.posts.Load(), int64(0))

		s, err = Reprocess(context.Background(), tl.l, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now(), Guard: &LookupGuard{TrustNotFound: true}})
		assert.NilError(t, err)
		assert.Equal(t, s.Count(string(generated.RspHTTP200)), 1)
		assert.Equal(t, c.sim.PostCount(g), 1)
	})
}

// TestResolveTrustsAfterA200InTheRun: with a core whose two answers are
// alike, a lookup answering 200 in the run shows the route served: the
// 404 looked up before it stays unverified (unchanged, exit 1), the 404s
// after it settle.
func TestResolveTrustsAfterA200InTheRun(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		c := newCore(t)
		body := alikeCores[0].body
		c.answer404(body, body)
		first := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, 3*time.Hour)
		posted := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, 2*time.Hour)
		after := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
		c.post(t, tl, posted)

		// One row at a time, so that "before" and "after" the 200 are
		// the rows' order.
		s, err := Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{MinAge: time.Minute, Now: time.Now(), Pace: Pace{MaxInFlight: 1, Rows: 1}})
		assert.ErrorIs(t, err, ErrLookupUnverified)
		assert.Equal(t, s.String(), "resolve: selected=3 done=1 failed=1 unreachable=0 skipped=0 unknown_tx=0 undecodable=0 unverified=1")
		assert.Equal(t, tl.row(first).State, ledger.StateUnknown)
		assert.Equal(t, tl.row(posted).State, ledger.StateDone)
		assert.Equal(t, tl.row(after).State, ledger.StateFailed)

		// The next run looks up the posted row (DONE/0000 now): 200.
		s, err = Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{MinAge: time.Minute, Now: time.Now()})
		assert.NilError(t, err)
		assert.Equal(t, s.Count("failed"), 1)
		assert.Equal(t, tl.row(first).State, ledger.StateFailed)
	})
}

// TestResolveDeniedPostedRowIsNoEvidence: the newest row the ledger holds
// as posted (DONE/0000) is denied by the core (its lookup answers 404),
// but the core answers an unknown transfer and a path it does not serve
// differently: the route is served, so its 404 settles the row, and the
// denial is logged as a warning naming the posted GUID.
func TestResolveDeniedPostedRowIsNoEvidence(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		c := newCore(t)
		c.answer404(testkit.Fixed(noSuchTransfer), testkit.Fixed(noSuchPath))
		denied := tl.seed(ledger.StateDone, generated.RspHTTP200, 2*time.Hour) // the core never saw it
		g := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
		var log bytes.Buffer
		s, err := Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{MinAge: time.Minute, Now: time.Now(),
			Log: slog.New(slog.NewTextHandler(&log, nil))})
		assert.NilError(t, err)
		assert.Equal(t, s.Count("failed"), 1)
		assert.Equal(t, tl.row(g).State, ledger.StateFailed)
		assert.Assert(t, strings.Contains(log.String(), "level=WARN"), log.String())
		assert.Assert(t, strings.Contains(log.String(), "posted="+denied), log.String())
		assert.Assert(t, strings.Contains(log.String(), "the core answered 404 to the lookup of "+denied), log.String())
	})
}

// TestGuardCheckUnanswered: the row's lookup answers 404, and the core
// then gives the guard's comparison no answer (its GET of a path it does
// not serve fails with 503). That is no evidence either way: the row is
// unchanged as for an unreachable core (counted unreachable, not
// unverified), resolve exits 1 and reprocess stops there, no attempt
// spent.
func TestGuardCheckUnanswered(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		c := newCore(t)
		c.answer404(testkit.Fixed(noSuchTransfer), testkit.Fixed(noSuchPath))
		before := func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, probeSuffix) {
				c.failLookups.Store(true) // this GET and the ones after it
			}
		}
		c.before.Store(&before)
		u := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
		f := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
		rows := map[string]ledger.Row{u: tl.row(u), f: tl.row(f)}

		s, err := Resolve(context.Background(), tl.l, c.client(t), ResolveConfig{MinAge: time.Minute, Now: time.Now()})
		assert.ErrorIs(t, err, ErrCoreUnreachable)
		assert.Assert(t, !errors.Is(err, ErrLookupUnverified), "%v", err)
		assert.Equal(t, s.Count(outcomeUnreachable), 1)
		assert.Equal(t, s.Count(OutcomeUnverified), 0)

		c.failLookups.Store(false)
		s, err = Reprocess(context.Background(), tl.l, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
		assert.ErrorIs(t, err, ErrCoreUnreachable)
		assert.Assert(t, !errors.Is(err, ErrLookupUnverified), "%v", err)
		assert.ErrorContains(t, err, "whose lookup could not tell whether the core posted it, so it was not sent and is unchanged")
		assert.ErrorContains(t, err, "HTTP 503")
		assert.Equal(t, s.Count(outcomeUnreachable), 1)
		for g, row := range rows {
			assert.DeepEqual(t, tl.row(g), row)
		}
		assert.Equal(t, c.posts.Load(), int64(0))
	})
}
