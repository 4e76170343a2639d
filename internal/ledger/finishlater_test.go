package ledger

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/testkit"
)

// later queues FinishLater and returns a channel that gets its result.
func later(t *testing.T, l *Ledger, guid string, to State, code string, resp []byte) <-chan error {
	t.Helper()
	res := make(chan error, 1)
	assert.NilError(t, l.FinishLater(context.Background(), guid, 1, Outcome{Why: Why{Reason: "test"}, State: to, RspCode: code, Response: resp}, func(err error) { res <- err }))
	return res
}

// result waits for a FinishLater result, bounded so a lost callback fails
// the test instead of hanging it.
func result(t *testing.T, res <-chan error) error {
	t.Helper()
	select {
	case err := <-res:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("FinishLater never reported its result")
		return nil
	}
}

func TestFinishLater(t *testing.T) {
	eachStore(t, testFinishLater)
}

func testFinishLater(t *testing.T, l *Ledger) {
	ctx := context.Background()
	r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	seed(t, l, r, StateSent, "")

	resp := responseFrame(r.GUID, codeOK)
	buf := append([]byte(nil), resp...)
	res := later(t, l, r.GUID, StateDone, codeOK, buf)
	clear(buf) // the caller reuses its buffer at once: FinishLater copied it
	assert.NilError(t, result(t, res))

	row, err := l.Get(ctx, r.GUID)
	assert.NilError(t, err)
	assert.Equal(t, row.State, StateDone)
	assert.Equal(t, row.RspCode, codeOK)
	assert.DeepEqual(t, row.Response, resp)

	// The row is no longer SENT: the result says so, as Finish's would.
	err = result(t, later(t, l, r.GUID, StateUnknown, codeTimeout, nil))
	assert.Check(t, errors.Is(err, ErrStateChanged))
	assert.Check(t, is.ErrorContains(err, "ledger: finish "+r.GUID))
	row2, err := l.Get(ctx, r.GUID)
	assert.NilError(t, err)
	assert.DeepEqual(t, row2, row)
}

// TestFinishLaterThenClaim: a channel that got its answer may send the
// same GUID again at once. The outcome was queued before the answer went
// out, and the writer runs operations in queue order, so the new claim
// finds the outcome: a replay, never E903.
func TestFinishLaterThenClaim(t *testing.T) {
	eachStore(t, testFinishLaterThenClaim)
}

func testFinishLaterThenClaim(t *testing.T, l *Ledger) {
	ctx := context.Background()
	for range 50 {
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		seed(t, l, r, StateSent, "")
		resp := responseFrame(r.GUID, codeOK)
		res := later(t, l, r.GUID, StateDone, codeOK, resp)

		c, err := l.Claim(ctx, r) // without waiting for res
		assert.NilError(t, err)
		assert.Equal(t, c.Outcome, Replay)
		assert.DeepEqual(t, c.Response, resp)
		assert.NilError(t, result(t, res))
	}
}

func TestFinishLaterRefused(t *testing.T) {
	eachStore(t, testFinishLaterRefused)
}

func testFinishLaterRefused(t *testing.T, l *Ledger) {
	ctx := context.Background()
	r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	seed(t, l, r, StateSent, "")
	never := func(err error) { t.Errorf("then called with %v", err) }

	// Nothing is queued, and then is not called, for a state Finish does
	// not take or a DONE without its response.
	assert.ErrorContains(t, l.FinishLater(ctx, r.GUID, 1, Outcome{Why: Why{Reason: "test"}, State: StateSent, RspCode: ""}, never), "cannot finish")
	assert.ErrorContains(t, l.FinishLater(ctx, r.GUID, 1, Outcome{Why: Why{Reason: "test"}, State: StateDone, RspCode: codeOK}, never), "needs its response")

	assert.NilError(t, l.Close())
	err := l.FinishLater(ctx, r.GUID, 1, Outcome{Why: Why{Reason: "test"}, State: StateDone, RspCode: codeOK, Response: responseFrame(r.GUID, codeOK)}, never)
	assert.Check(t, errors.Is(err, ErrClosed))
}

// TestCloseRecordsQueuedOutcomes: Close runs every outcome queued before
// it, and each caller hears its result before Close returns.
func TestCloseRecordsQueuedOutcomes(t *testing.T) {
	testkit.EachStore(t, testCloseRecordsQueuedOutcomes)
}

func testCloseRecordsQueuedOutcomes(t *testing.T, path string) {
	ctx := context.Background()
	l, err := Open(path)
	assert.NilError(t, err)
	var guids []string
	var results []<-chan error
	for range 20 {
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		seed(t, l, r, StateSent, "")
		guids = append(guids, r.GUID)
		results = append(results, later(t, l, r.GUID, StateDone, codeOK, responseFrame(r.GUID, codeOK)))
	}
	assert.NilError(t, l.Close())
	for i, res := range results {
		select {
		case err := <-res:
			assert.NilError(t, err, guids[i])
		default:
			t.Fatalf("%s: result not reported before Close returned", guids[i])
		}
	}

	l = openLedger(t, path)
	for _, g := range guids {
		row, err := l.Get(ctx, g)
		assert.NilError(t, err)
		assert.Equal(t, row.State, StateDone, g)
	}
}

// TestFinishLaterFullQueue: while the writer is stuck and its queue is
// full, FinishLater waits only until ctx ends, queues nothing and never
// calls then; the outcomes queued before it are recorded once the writer
// moves again.
func TestFinishLaterFullQueue(t *testing.T) {
	eachStore(t, testFinishLaterFullQueue, WithMaxBatch(1))
}

func testFinishLaterFullQueue(t *testing.T, l *Ledger) {
	ctx := context.Background()
	var pending []Request
	for range room(l) + 1 {
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		seed(t, l, r, StateSent, "")
		pending = append(pending, r)
	}
	late, pending := pending[len(pending)-1], pending[:len(pending)-1]

	release := blockWriter(t, l)
	var results []<-chan error
	for _, r := range pending {
		results = append(results, later(t, l, r.GUID, StateDone, codeOK, responseFrame(r.GUID, codeOK)))
	}
	assert.Equal(t, queued(l), room(l), "the queue is full")

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := l.FinishLater(short, late.GUID, 1, Outcome{Why: Why{Reason: "test"}, State: StateDone, RspCode: codeOK, Response: responseFrame(late.GUID, codeOK)}, func(err error) {
		t.Errorf("then called for an outcome that was not queued: %v", err)
	})
	assert.Check(t, errors.Is(err, context.DeadlineExceeded), "got %v", err)

	release()
	for _, res := range results {
		assert.NilError(t, result(t, res))
	}
	for _, r := range pending {
		row, err := l.Get(ctx, r.GUID)
		assert.NilError(t, err)
		assert.Equal(t, row.State, StateDone)
	}
	row, err := l.Get(ctx, late.GUID)
	assert.NilError(t, err)
	assert.Equal(t, row.State, StateSent, "nothing was queued for it")
}

// withLinger sets how long an outcome nobody waits for waits for company.
func withLinger(d time.Duration) Option { return func(c *config) { c.linger = d } }

// TestOutcomeSharesNextClaimsCommit: with one channel, the outcome queued
// with FinishLater waits for the channel's next claim, and both are
// committed together: one commit for the two. (The wait is made long
// here, so that only the claim's arrival can end it.)
func TestOutcomeSharesNextClaimsCommit(t *testing.T) {
	eachStore(t, testOutcomeSharesNextClaimsCommit, withLinger(time.Hour))
}

func testOutcomeSharesNextClaimsCommit(t *testing.T, l *Ledger) {
	ctx := context.Background()
	r1 := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	seed(t, l, r1, StateSent, "")
	r2 := request(txTransfer, testkit.GUID(), sentAt1, bodyA)

	commits := l.Commits()
	res := later(t, l, r1.GUID, StateDone, codeOK, responseFrame(r1.GUID, codeOK))
	select {
	case err := <-res:
		t.Fatalf("the outcome was committed alone (%v)", err)
	default:
	}
	c, err := l.Claim(ctx, r2)
	assert.NilError(t, err)
	assert.Equal(t, c.Outcome, Owned)
	assert.NilError(t, result(t, res))
	assert.Equal(t, l.Commits()-commits, uint64(1))

	row, err := l.Get(ctx, r1.GUID)
	assert.NilError(t, err)
	assert.Equal(t, row.State, StateDone)
	row, err = l.Get(ctx, r2.GUID)
	assert.NilError(t, err)
	assert.Equal(t, row.State, StateSent)

	// An operation somebody waits for never waits for company.
	assert.NilError(t, l.Finish(ctx, r2.GUID, 1, Outcome{Why: Why{Reason: "test"}, State: StateDone, RspCode: codeOK, Response: responseFrame(r2.GUID, codeOK)}))
	assert.Equal(t, l.Commits()-commits, uint64(2))
}

// TestLingerEndsAtClose: Close does not wait out an outcome's wait for
// company; the outcome is committed.
func TestLingerEndsAtClose(t *testing.T) {
	eachStore(t, testLingerEndsAtClose, withLinger(time.Hour))
}

func testLingerEndsAtClose(t *testing.T, l *Ledger) {
	r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	seed(t, l, r, StateSent, "")
	res := later(t, l, r.GUID, StateDone, codeOK, responseFrame(r.GUID, codeOK))
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	assert.NilError(t, result(t, res))
	select {
	case err := <-closed:
		assert.NilError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the outcome's company")
	}
	var state string
	assert.NilError(t, raw(t, l).QueryRow(`SELECT state FROM tx WHERE guid = ?`, []any{r.GUID}, &state))
	assert.Equal(t, State(state), StateDone)
}

// errFunc is a completer made of a function.
type errFunc func(error)

func (f errFunc) completed(err error) { f(err) }

// ranWhileWaiting queues run as an operation nobody waits for, as
// FinishLater queues an outcome, on a ledger whose outcomes wait for
// company; it waits until run has run (the writer runs it while the
// operation waits) and returns a channel that gets the operation's result.
func ranWhileWaiting(t *testing.T, l *Ledger, run func(stmts) error) <-chan error {
	t.Helper()
	ran := make(chan struct{}, 1)
	res := make(chan error, 1)
	op := operation{run: opFunc(func(tx stmts) error {
		defer signal(ran)
		return run(tx)
	})}
	assert.NilError(t, l.st.enqueue(context.Background(), op, errFunc(func(err error) { res <- err })))
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the outcome's statements did not run while it waited")
	}
	return res
}

// signal tells ch, without waiting (an op runs again after a rollback).
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// TestOutcomeRunsWhileItWaits: on SQLite, an outcome that waits for
// company has its statements run while it waits, inside the batch's
// transaction: nothing is committed or visible until the claim it waited
// for arrives, and then both commit once.
func TestOutcomeRunsWhileItWaits(t *testing.T) {
	l := newLedger(t, withLinger(time.Hour))
	ctx := context.Background()
	early := testkit.GUID()
	commits := l.Commits()
	res := ranWhileWaiting(t, l, func(tx stmts) error {
		_, err := tx.changeOne(`INSERT INTO tx(guid, state) VALUES (?, 'SENT')`, []any{early}, pending{guid: early, why: Why{Reason: "test"}})
		return err
	})
	assert.Equal(t, l.Commits(), commits)
	_, err := l.Get(ctx, early)
	assert.Check(t, errors.Is(err, ErrNotFound), "an uncommitted write is visible: %v", err)

	r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	c, err := l.Claim(ctx, r)
	assert.NilError(t, err)
	assert.Equal(t, c.Outcome, Owned)
	assert.NilError(t, result(t, res))
	assert.Equal(t, l.Commits()-commits, uint64(1))
	for _, g := range []string{early, r.GUID} {
		row, err := l.Get(ctx, g)
		assert.NilError(t, err)
		assert.Equal(t, row.State, StateSent)
	}
}

// TestEarlyRunFailureDoesNotSpoilItsBatch: an outcome whose statements,
// run while it waited, failed takes nothing with it: the claim that joined
// its batch is committed on its own, and the outcome's writes are undone.
func TestEarlyRunFailureDoesNotSpoilItsBatch(t *testing.T) {
	l := newLedger(t, withLinger(time.Hour))
	ctx := context.Background()
	partial := testkit.GUID()
	commits := l.Commits()
	res := ranWhileWaiting(t, l, func(tx stmts) error {
		if _, err := tx.changeOne(`INSERT INTO tx(guid, state) VALUES (?, 'SENT')`, []any{partial}, pending{guid: partial, why: Why{Reason: "test"}}); err != nil {
			return err
		}
		_, err := tx.changeOne(`INSERT INTO tx(guid, state) VALUES (?, 'BOGUS')`, []any{testkit.GUID()}, pending{why: Why{Reason: "test"}})
		return err
	})

	r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	c, err := l.Claim(ctx, r)
	assert.NilError(t, err)
	assert.Equal(t, c.Outcome, Owned)
	err = result(t, res)
	assert.Check(t, err != nil && strings.Contains(strings.ToLower(err.Error()), "check constraint"), "%v", err)
	assert.Equal(t, l.Commits()-commits, uint64(1))
	row, err := l.Get(ctx, r.GUID)
	assert.NilError(t, err)
	assert.Equal(t, row.State, StateSent)
	_, err = l.Get(ctx, partial)
	assert.Check(t, errors.Is(err, ErrNotFound), "the failed outcome's first insert was not undone")
}
