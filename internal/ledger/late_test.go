package ledger

import (
	"context"
	"errors"
	"testing"

	"gotest.tools/v3/assert"

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
		assert.NilError(t, l.AbandonClaim(ctx, r.GUID, c.Attempts, o))
		row, err := l.Get(ctx, r.GUID)
		assert.NilError(t, err)
		assert.Equal(t, row.State, StateFailed)
		assert.Equal(t, row.RspCode, codeNoConnect)

		// Re-claimed by the resend: an abandon of the first claim is refused.
		c2, err := l.Claim(ctx, r)
		assert.NilError(t, err)
		assert.Equal(t, c2.Outcome, Owned)
		err = l.AbandonClaim(ctx, r.GUID, c.Attempts, o)
		assert.Check(t, errors.Is(err, ErrStateChanged), "got %v", err)
		// A claim that never landed: nothing to abandon.
		err = l.AbandonClaim(ctx, testkit.GUID(), 1, o)
		assert.Check(t, errors.Is(err, ErrNotFound), "got %v", err)
	})
}
