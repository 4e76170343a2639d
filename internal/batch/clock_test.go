package batch

import (
	"context"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/pgtest"
)

// dbAge sets a row's updated_at to age before the database's clock.
func (tl *testLedger) dbAge(guid string, age time.Duration) {
	tl.raw.Exec(`UPDATE tx SET updated_at = CURRENT_TIMESTAMP - make_interval(secs => ?) WHERE guid = ?`, age.Seconds(), guid)
}

// TestAgesByTheDatabasesClock: the database's clock runs 20 minutes behind
// this process's (PostgreSQL under libfaketime). By the process's clock
// every row would look 20 minutes older than it is: a call still under way
// would be looked up (404: FAILED/E902, and reprocess would post it a
// second time) and a young UNKNOWN row settled too early. resolve and
// purge measure every age by the database's clock (SPEC 6a).
func TestAgesByTheDatabasesClock(t *testing.T) {
	srv := pgtest.NewServer(t, pgtest.Options{Env: pgtest.FakeClock(t, -20*time.Minute)})
	tl := newTestLedger(t, srv.URL(t))
	c := newCore(t)
	ctx := context.Background()

	row := func(state ledger.State, code generated.RspCode, age time.Duration) string {
		g := tl.seed(state, code, 0)
		tl.dbAge(g, age)
		return g
	}
	inFlight := row(ledger.StateSent, "", 0)
	youngUnknown := row(ledger.StateUnknown, generated.RspReadTimeout, 10*time.Second)
	oldUnknown := row(ledger.StateUnknown, generated.RspReadTimeout, 2*time.Hour)
	staleSent := row(ledger.StateSent, "", 2*time.Hour)

	sum, err := Resolve(ctx, tl.l, c.client(t), ResolveConfig{MinAge: time.Minute, StaleSent: 10 * time.Minute, Now: time.Now()})
	assert.NilError(t, err)
	assert.Equal(t, sum.Count("selected"), 2, sum.String())
	assert.Equal(t, tl.row(inFlight).State, ledger.StateSent, "a call under way is not looked up")
	assert.Equal(t, tl.row(youngUnknown).State, ledger.StateUnknown, "a young UNKNOWN row waits")
	assert.Equal(t, tl.row(oldUnknown).State, ledger.StateFailed, "an old one is settled (404)")
	assert.Equal(t, tl.row(staleSent).State, ledger.StateFailed, "a stale SENT row is settled (404)")
	assert.Equal(t, c.posts.Load(), int64(0))

	// purge: a DONE row 10 minutes short of a day by the database's clock
	// (10 minutes past it by this process's) stays.
	young := row(ledger.StateDone, generated.RspHTTP200, 24*time.Hour-10*time.Minute)
	old := row(ledger.StateDone, generated.RspHTTP200, 24*time.Hour+10*time.Minute)
	s, err := Purge(ctx, tl.l, PurgeConfig{Days: 1})
	assert.NilError(t, err)
	assert.Equal(t, s.Count("deleted"), 1)
	assert.Assert(t, tl.exists(young))
	assert.Assert(t, !tl.exists(old))
}
