package relay

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/poll"

	"lhrelay/internal/faultproxy"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/testkit"
)

// proxied starts a faultproxy in front of the server of u and returns u
// through it.
func proxied(t *testing.T, u string) (string, *faultproxy.Proxy) {
	t.Helper()
	pu, err := url.Parse(u)
	assert.NilError(t, err)
	p, err := faultproxy.Start(pu.Host)
	assert.NilError(t, err)
	t.Cleanup(func() { p.Close() })
	return strings.Replace(u, pu.Host, p.Addr(), 1), p
}

// waitLog waits for a line containing s in e's log.
func waitLog(t *testing.T, e *env, s string) {
	t.Helper()
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if strings.Contains(e.log.String(), s) {
			return poll.Success()
		}
		return poll.Continue("no log line %q yet", s)
	}, poll.WithTimeout(10*time.Second), poll.WithDelay(5*time.Millisecond))
}

// TestLostCommitAnswer: the database's answer to a claim's COMMIT is lost
// (a proxy cuts the connection right after passing the COMMIT on). The
// claim committed, but the relay cannot know: E902, no core call. Once the
// database answers again the relay makes the row FAILED/E902, so the
// channel's resend is served (posted once) within seconds, not refused
// E903 until settling (SPEC 6).
func TestLostCommitAnswer(t *testing.T) {
	u, proxy := proxied(t, pgtest.URL(t))
	sim := simCore(0)
	core := &counting{h: sim}
	e := startEnv(t, envConfig{core: core, ledger: true, ledgerURL: u})
	guid := testkit.GUID()
	frame := transferFrame(t, guid)

	proxy.CutAfterCommits(1)
	a := e.roundTrip(frame)
	assert.Equal(t, a.code(), string(generated.RspConnectFail))
	assert.Equal(t, proxy.CommitsCut(), 1)
	assert.Equal(t, core.calls.Load(), int64(0), "no core call for an unconfirmed claim")

	waitLog(t, e, "unconfirmed claim found committed")
	row := waitState(t, e, guid, ledger.StateFailed)
	assert.Equal(t, row.RspCode, string(generated.RspConnectFail))

	start := time.Now()
	retry := e.roundTrip(frame)
	assert.Equal(t, retry.code(), string(generated.RspHTTP200), "the resend is served")
	assert.Assert(t, time.Since(start) < 5*time.Second)
	assert.Equal(t, sim.PostCount(guid), 1, "posted once")
	assert.Equal(t, e.row(guid).Attempts, 2)
}

// TestAbandonLeavesAFreshClaimAlone is schedule 289 of verify on
// PostgreSQL: a claim's COMMIT never reaches the database (the connection
// is cut with it), so the claim is unconfirmed and answered E902. The
// channel's resend claims the GUID afresh, with attempts 1 again, and its
// call is held at the core. The first claim's abandon must take only its
// own claim's row: were it to make this one FAILED mid-call, the next
// resend would be posted again.
func TestAbandonLeavesAFreshClaimAlone(t *testing.T) {
	u, proxy := proxied(t, pgtest.URL(t))
	guid := testkit.GUID()
	g, sim := holdFirst(guid)
	e := startEnv(t, envConfig{core: sim, ledger: true, ledgerURL: u})
	frame := transferFrame(t, guid)

	proxy.DropCommits(1)
	assert.Equal(t, e.roundTrip(frame).code(), string(generated.RspConnectFail))
	assert.Equal(t, proxy.CommitsDropped(), 1)

	go2 := make(chan struct{})
	second := make(chan rawAnswer, 1)
	sendAsync(e.dial(), frame, go2, second)
	close(go2)
	g.WaitArrival(t)
	waitLog(t, e, "msg=\"unconfirmed claim")
	assert.Check(t, is.Contains(e.log.String(), "not SENT with its attempts and token"))
	assert.Equal(t, e.row(guid).State, ledger.StateSent, "the fresh claim's call is under way")
	// The channel resends while the call is held: refused, not posted.
	assert.Equal(t, e.roundTrip(frame).code(), string(generated.RspInProgress))

	g.Open()
	a := next(t, second, time.After(10*time.Second), "the held call's answer")
	assert.Equal(t, a.code(), string(generated.RspHTTP200))
	e.srv.WaitRecorded()
	row := e.row(guid)
	assert.Equal(t, row.State, ledger.StateDone)
	assert.Equal(t, row.Attempts, 1)
	assert.Equal(t, sim.PostCount(guid), 1, "posted once")
}

// TestCancelledSyncWaitIsNotDurable: a primary whose synchronous standby
// stops taking WAL (its WAL receiver paused) keeps a claim's COMMIT
// waiting; the wait is cancelled (pg_cancel_backend, as an operator or a
// pooler may), and PostgreSQL reports the COMMIT done with the warning
// "canceling wait for synchronous replication". The claim is not durable:
// E902 and no core call (SPEC 6a); the row, committed on the primary, is
// made FAILED/E902 and the resend is served once.
func TestCancelledSyncWaitIsNotDurable(t *testing.T) {
	pair := pgtest.NewPair(t, true, pgtest.Options{})
	sim := simCore(0)
	core := &counting{h: sim}
	e := startEnv(t, envConfig{core: core, ledger: true, ledgerURL: pair.URL()})
	// A first transfer while the standby keeps up: durable, posted.
	assert.Equal(t, e.roundTrip(transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
	e.srv.WaitRecorded() // its outcome's commit is not the one held below

	resume := pair.Standby.PauseReplication(t)
	guid := testkit.GUID()
	start := make(chan struct{})
	answered := make(chan rawAnswer, 1)
	sendAsync(e.dial(), transferFrame(t, guid), start, answered)
	close(start)
	cancelSyncWait(t, pair.Primary.AdminURL())
	a := next(t, answered, time.After(10*time.Second), "the claim's answer")
	assert.Equal(t, a.code(), string(generated.RspConnectFail))
	assert.Equal(t, core.calls.Load(), int64(1), "no core call for the claim whose sync wait was cancelled")
	assert.Check(t, is.Contains(e.log.String(), "not confirmed by a synchronous standby"))
	resume()

	waitState(t, e, guid, ledger.StateFailed)
	assert.Equal(t, e.roundTrip(transferFrame(t, guid)).code(), string(generated.RspHTTP200))
	assert.Equal(t, sim.PostCount(guid), 1)
}

// cancelSyncWait waits for a backend of the server at admin to wait for
// synchronous replication, and cancels it.
func cancelSyncWait(t *testing.T, admin string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, admin)
	assert.NilError(t, err)
	defer c.Close(context.Background())
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		var cancelled int
		err := c.QueryRow(ctx, `SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`).Scan(&cancelled)
		switch {
		case err != nil:
			return poll.Error(err)
		case cancelled == 0:
			return poll.Continue("no COMMIT waits for the standby yet")
		}
		return poll.Success()
	}, poll.WithTimeout(10*time.Second), poll.WithDelay(5*time.Millisecond))
}

// waitState waits until guid's row is in state.
func waitState(t *testing.T, e *env, guid string, state ledger.State) ledger.Row {
	t.Helper()
	var row ledger.Row
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		var err error
		row, err = e.led.Get(context.Background(), guid)
		if err != nil || row.State != state {
			return poll.Continue("row %s: %s %v", guid, row.State, err)
		}
		return poll.Success()
	}, poll.WithTimeout(10*time.Second), poll.WithDelay(10*time.Millisecond))
	return row
}

// pgNow reads the database's clock.
func pgNow(t *testing.T, u string) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, u)
	assert.NilError(t, err)
	defer c.Close(ctx)
	var now time.Time
	assert.NilError(t, c.QueryRow(ctx, `SELECT now()`).Scan(&now))
	return now
}
