package ledger

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/faultproxy"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/testkit"
)

// A lookup that came too early settled the row FAILED/E902 while the call
// was under way; the core's late answer is the truth and is recorded (SPEC
// 6). Once the row has been re-claimed, the late answer is refused and
// counted as a conflict.
func TestLateAnswer(t *testing.T) {
	eachStore(t, testLateAnswer)
}

func testLateAnswer(t *testing.T, l *Ledger) {
	ctx := context.Background()
	done := func(guid string) Outcome {
		return Outcome{Why: Why{Reason: "test"}, State: StateDone, RspCode: codeOK, Response: responseFrame(guid, codeOK)}
	}
	notPosted := func(guid string) Outcome {
		return Outcome{Why: Why{Reason: "test"}, State: StateFailed, RspCode: codeNoConnect, Response: responseFrame(guid, codeNoConnect)}
	}

	// Settled early, not re-claimed: recorded.
	r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	c, err := l.Claim(ctx, r)
	assert.NilError(t, err)
	assert.NilError(t, l.Transition(ctx, r.GUID, StateSent, notPosted(r.GUID)))
	assert.NilError(t, l.Finish(ctx, r.GUID, c.Attempts, done(r.GUID)))
	row, err := l.Get(ctx, r.GUID)
	assert.NilError(t, err)
	assert.Equal(t, row.State, StateDone)
	assert.Equal(t, row.Attempts, 1)
	assert.Equal(t, l.LateAnswers(), uint64(1))
	assert.Equal(t, l.Conflicts(), uint64(0))

	// Settled early and re-claimed since: left alone, reported.
	r2 := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	c, err = l.Claim(ctx, r2)
	assert.NilError(t, err)
	assert.NilError(t, l.Transition(ctx, r2.GUID, StateSent, notPosted(r2.GUID)))
	again, err := l.Claim(ctx, r2)
	assert.NilError(t, err)
	assert.Equal(t, again.Outcome, Owned)
	assert.Equal(t, again.Attempts, 2)
	err = l.Finish(ctx, r2.GUID, c.Attempts, done(r2.GUID))
	assert.Check(t, errors.Is(err, ErrReclaimed), "got %v", err)
	assert.Check(t, errors.Is(err, ErrStateChanged))
	row, err = l.Get(ctx, r2.GUID)
	assert.NilError(t, err)
	assert.Equal(t, row.State, StateSent)
	assert.Equal(t, row.Attempts, 2)
	assert.Equal(t, l.Conflicts(), uint64(1))
	// The later claim's own answer still lands on its row.
	assert.NilError(t, l.Finish(ctx, r2.GUID, again.Attempts, done(r2.GUID)))

	// An answer to an earlier attempt never lands on a later claim's SENT
	// row.
	r3 := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	_, err = l.Claim(ctx, r3)
	assert.NilError(t, err)
	assert.NilError(t, l.Finish(ctx, r3.GUID, 1, notPosted(r3.GUID)))
	_, err = l.Claim(ctx, r3)
	assert.NilError(t, err)
	err = l.Finish(ctx, r3.GUID, 1, done(r3.GUID))
	assert.Check(t, errors.Is(err, ErrReclaimed), "got %v", err)
}

// AbandonClaim turns a claim whose commit was not confirmed, still SENT
// with its attempts, into FAILED/E902; any other row is left alone.
func TestAbandonClaim(t *testing.T) {
	eachStore(t, func(t *testing.T, l *Ledger) {
		ctx := context.Background()
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		c, err := l.Claim(ctx, r)
		assert.NilError(t, err)
		o := Outcome{Why: Why{Reason: "test"}, State: StateFailed, RspCode: codeNoConnect, Response: responseFrame(r.GUID, codeNoConnect)}
		token := tokenOf(t, l, r.GUID)
		assert.NilError(t, l.AbandonClaim(ctx, r.GUID, c.Attempts, token, o))
		row, err := l.Get(ctx, r.GUID)
		assert.NilError(t, err)
		assert.Equal(t, row.State, StateFailed)
		assert.Equal(t, row.RspCode, codeNoConnect)

		// Re-claimed by the resend: an abandon of the first claim is refused.
		c2, err := l.Claim(ctx, r)
		assert.NilError(t, err)
		assert.Equal(t, c2.Outcome, Owned)
		err = l.AbandonClaim(ctx, r.GUID, c.Attempts, token, o)
		assert.Check(t, errors.Is(err, ErrStateChanged), "got %v", err)
		// A claim that never landed: nothing to abandon.
		err = l.AbandonClaim(ctx, testkit.GUID(), 1, token, o)
		assert.Check(t, errors.Is(err, ErrNotFound), "got %v", err)
	})
}

// An abandon takes only its own claim's row: (GUID, attempts) does not
// identify a claim. A claim whose COMMIT never landed leaves the GUID free;
// a fresh claim of it (attempts 1 too) then owns the row, and the first
// claim's abandon must leave it SENT, or its call under way would be taken
// for one that never happened and the resend posted again.
func TestAbandonClaimLeavesAnotherClaimsRow(t *testing.T) {
	eachStore(t, func(t *testing.T, l *Ledger) {
		ctx := context.Background()
		o := Outcome{Why: Why{Reason: "test"}, State: StateFailed, RspCode: codeNoConnect}
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		c, err := l.Claim(ctx, r)
		assert.NilError(t, err)
		first := tokenOf(t, l, r.GUID)

		err = l.AbandonClaim(ctx, r.GUID, c.Attempts, "a claim that never landed", o)
		assert.Check(t, errors.Is(err, ErrStateChanged), "got %v", err)
		row, err := l.Get(ctx, r.GUID)
		assert.NilError(t, err)
		assert.Equal(t, row.State, StateSent)
		assert.Equal(t, len(history(t, l, r.GUID)), 1, "the refused abandon writes no history")

		// A re-claim is a claim of its own: a new token.
		assert.NilError(t, l.Finish(ctx, r.GUID, c.Attempts, o))
		again, err := l.Claim(ctx, r)
		assert.NilError(t, err)
		assert.Equal(t, again.Outcome, Owned)
		assert.Check(t, tokenOf(t, l, r.GUID) != first)
		n, err := l.Reclaim(ctx, r.GUID)
		assert.Check(t, errors.Is(err, ErrStateChanged), "got %d, %v", n, err)
		assert.NilError(t, l.Finish(ctx, r.GUID, again.Attempts, o))
		before := tokenOf(t, l, r.GUID)
		_, err = l.Reclaim(ctx, r.GUID)
		assert.NilError(t, err)
		assert.Check(t, tokenOf(t, l, r.GUID) != before, "reprocess's re-claim gets its own token")
		mustAudit(t, l)
	})
}

// proxiedLedger opens a ledger on a fresh PostgreSQL schema reached through
// a fault proxy, to lose COMMITs or their answers.
func proxiedLedger(t *testing.T) (*Ledger, *faultproxy.Proxy) {
	t.Helper()
	u := pgtest.URL(t)
	pu, err := url.Parse(u)
	assert.NilError(t, err)
	p, err := faultproxy.Start(pu.Host)
	assert.NilError(t, err)
	t.Cleanup(func() { p.Close() })
	return openLedger(t, strings.Replace(u, pu.Host, p.Addr(), 1)), p
}

// Schedule 289 of verify on PostgreSQL: a claim's COMMIT never reaches the
// server (its answer is lost with it), and a fresh claim of the same GUID
// owns the row with attempts 1; the first claim's abandon leaves that row
// alone, and the fresh claim's outcome lands.
func TestAbandonOfAClaimThatNeverLanded(t *testing.T) {
	l, p := proxiedLedger(t)
	ctx := context.Background()
	r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)

	p.DropCommits(1)
	_, err := l.Claim(ctx, r)
	var uc *UnconfirmedClaimError
	assert.Assert(t, errors.As(err, &uc), "got %v", err)
	assert.Equal(t, p.CommitsDropped(), 1)
	assert.Equal(t, uc.Attempts, 1)
	_, err = l.Get(ctx, r.GUID)
	assert.Check(t, errors.Is(err, ErrNotFound), "the dropped claim landed: %v", err)

	c, err := l.Claim(ctx, r)
	assert.NilError(t, err)
	assert.Equal(t, c.Outcome, Owned)
	assert.Equal(t, c.Attempts, uc.Attempts, "the same (GUID, attempts): only the token tells the claims apart")

	o := Outcome{Why: Why{Reason: "claim's commit not confirmed"}, State: StateFailed, RspCode: codeNoConnect}
	err = l.AbandonClaim(ctx, uc.GUID, uc.Attempts, uc.Token, o)
	assert.Check(t, errors.Is(err, ErrStateChanged), "got %v", err)
	row, err := l.Get(ctx, r.GUID)
	assert.NilError(t, err)
	assert.Equal(t, row.State, StateSent, "the fresh claim's call is under way")
	assert.NilError(t, l.Finish(ctx, r.GUID, c.Attempts, Outcome{Why: Why{Reason: "test"}, State: StateDone, RspCode: codeOK, Response: responseFrame(r.GUID, codeOK)}))
	assert.Equal(t, l.LateAnswers(), uint64(0))
	mustAudit(t, l)
}

// A late answer (the row settled FAILED while the call was under way)
// whose COMMIT answer is lost is still recorded, once: whether the COMMIT
// landed (cut after it) or not (dropped), the writer's re-run finds the
// row as it must and finishes the job, and the history chain verifies.
func TestLateAnswerAfterALostCommit(t *testing.T) {
	for _, dropped := range []bool{false, true} {
		l, p := proxiedLedger(t)
		ctx := context.Background()
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		c, err := l.Claim(ctx, r)
		assert.NilError(t, err)
		assert.NilError(t, l.Transition(ctx, r.GUID, StateSent,
			Outcome{Why: Why{Reason: "lookup 404"}, State: StateFailed, RspCode: codeNoConnect, Response: responseFrame(r.GUID, codeNoConnect)}))

		if dropped {
			p.DropCommits(1)
		} else {
			p.CutAfterCommits(1)
		}
		recorded := make(chan error, 1)
		o := Outcome{Why: Why{Reason: "core answered HTTP 200"}, State: StateDone, RspCode: codeOK, Response: responseFrame(r.GUID, codeOK)}
		assert.NilError(t, l.FinishLater(ctx, r.GUID, c.Attempts, o, func(err error) { recorded <- err }))
		select {
		case err := <-recorded:
			assert.NilError(t, err, "dropped %v", dropped)
		case <-time.After(30 * time.Second):
			t.Fatal("the late answer's result never came")
		}
		assert.Equal(t, p.CommitsCut()+p.CommitsDropped(), 1)
		row, err := l.Get(ctx, r.GUID)
		assert.NilError(t, err)
		assert.Equal(t, row.State, StateDone, "dropped %v", dropped)
		assert.Check(t, l.LateAnswers() == 1, "dropped %v: %d late answers counted", dropped, l.LateAnswers())
		assert.DeepEqual(t, changesOf(history(t, l, r.GUID))[2:], []change{
			{StateFailed, StateDone, codeNoConnect, codeOK, 1, "late answer, recorded over FAILED (settled while the call was under way): core answered HTTP 200"},
		})
		mustAudit(t, l)
	}
}

// Verify schedules 25, 73 and 185 (PostgreSQL): an outcome's COMMIT
// landed but its answer was lost, and before the writer ran it again the
// channel's resend re-claimed the row. The re-run finds the row re-claimed;
// its own first run's history entry says it landed, so it writes nothing
// more: no false "may be posted twice" note, no conflict counted.
func TestRerunOfALandedOutcomeWritesNothingMore(t *testing.T) {
	l := openLedger(t, pgtest.URL(t))
	ctx := context.Background()
	r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	c, err := l.Claim(ctx, r)
	assert.NilError(t, err)
	o := Outcome{Why: Why{Reason: "core not called: breaker open"}, State: StateFailed, RspCode: codeNoConnect, Response: responseFrame(r.GUID, codeNoConnect)}
	assert.NilError(t, l.Finish(ctx, r.GUID, c.Attempts, o)) // landed; say its answer was lost
	again, err := l.Claim(ctx, r)
	assert.NilError(t, err)
	assert.Equal(t, again.Attempts, 2)
	before := history(t, l, r.GUID)

	run, counted, err := l.finishOp(r.GUID, c.Attempts, o)
	assert.NilError(t, err)
	err = l.st.(*pgStore).runOnce(ctx, &op{o: operation{guid: r.GUID, run: run, rerunnable: true}, rerun: true})
	counted(err)
	assert.NilError(t, err)
	assert.Equal(t, len(history(t, l, r.GUID)), len(before), "the re-run wrote nothing")
	assert.Equal(t, l.Conflicts(), uint64(0))
	row, err := l.Get(ctx, r.GUID)
	assert.NilError(t, err)
	assert.Equal(t, row.State, StateSent)
	assert.Equal(t, row.Attempts, 2)
	mustAudit(t, l)

	// A first run that did not land: the re-run is the conflict it is.
	r2 := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	c, err = l.Claim(ctx, r2)
	assert.NilError(t, err)
	assert.NilError(t, l.Transition(ctx, r2.GUID, StateSent, Outcome{Why: Why{Reason: "lookup 404"}, State: StateFailed, RspCode: codeNoConnect}))
	_, err = l.Claim(ctx, r2)
	assert.NilError(t, err)
	run, counted, err = l.finishOp(r2.GUID, c.Attempts, o)
	assert.NilError(t, err)
	err = l.st.(*pgStore).runOnce(ctx, &op{o: operation{guid: r2.GUID, run: run, rerunnable: true}, rerun: true})
	counted(err)
	assert.Check(t, errors.Is(err, ErrReclaimed), "got %v", err)
	assert.Equal(t, l.Conflicts(), uint64(1))
	mustAudit(t, l)
}
