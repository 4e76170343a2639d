package batch

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
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
// denies it, so no 404 settles anything; at the right one it confirms it,
// and a 404 settles the row never posted.
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
// serve exactly as it answers a lookup's 404 (same status, same media
// type) gives no evidence.
func TestLookupGuardSameAnswers(t *testing.T) {
	eachStore(t, testLookupGuardSameAnswers)
}

func testLookupGuardSameAnswers(t *testing.T, tl *testLedger) {
	c := newCore(t)
	g := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, time.Hour)
	// The simulator's 404 for a lookup is JSON and for an unknown path
	// text: a client at the root sees them differ, one below /api does not.
	var guard LookupGuard
	err := guard.check(context.Background(), tl.l, c.clientAt(t, "/api"), txOf(t, tl, g), bodyOf(t, tl, g))
	var ue *UnverifiedError
	assert.Assert(t, errors.As(err, &ue), "%v", err)
	assert.Assert(t, strings.HasPrefix(ue.Path, "/v1/transfers/"), "the lookup's own path: %s", ue.Path)
	assert.Equal(t, ue.Core, c.srv.URL+"/api")
	assert.ErrorContains(t, err, "as it answers a path it does not serve (HTTP 404 \"text/plain\")")
	assert.Assert(t, !guard.trustedNow(txOf(t, tl, g).Code), "a refusal is not remembered")
	assert.NilError(t, guard.check(context.Background(), tl.l, c.client(t), txOf(t, tl, g), bodyOf(t, tl, g)))
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
