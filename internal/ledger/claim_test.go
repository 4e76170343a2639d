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

func TestClaimNewIsOwnedAndDurable(t *testing.T) {
	eachStore(t, func(t *testing.T, l *Ledger) {
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)

		c, err := l.Claim(context.Background(), r)
		assert.NilError(t, err)
		assert.DeepEqual(t, c, Claim{Outcome: Owned, Attempts: 1})

		// Committed before Claim returned: another connection, outside the
		// package, sees the row at once.
		var (
			state, txCode, rspCode string
			req                    []byte
			resp                   []byte
			attempts               int
			updatedAt              dbTime
		)
		err = raw(t, l).QueryRow(`SELECT state, tx_code, rsp_code, request, response, attempts, updated_at FROM tx WHERE guid = ?`, []any{r.GUID},
			&state, &txCode, &rspCode, &req, &resp, &attempts, &updatedAt)
		assert.NilError(t, err)
		assert.Equal(t, state, "SENT")
		assert.Equal(t, txCode, txTransfer)
		assert.Equal(t, rspCode, "")
		assert.DeepEqual(t, req, r.Frame)
		assert.Check(t, resp == nil)
		assert.Equal(t, attempts, 1)
		at := updatedAt.t
		assert.Check(t, time.Since(at) < time.Minute && time.Since(at) > -time.Minute, "updated_at %s is not now (UTC)", at)
	})
}

func TestClaimExistingRow(t *testing.T) {
	eachStore(t, testClaimExistingRow)
}

func testClaimExistingRow(t *testing.T, l *Ledger) {
	ctx := context.Background()

	for _, tc := range []struct {
		state State
		code  string
		want  ClaimOutcome
	}{
		{StateDone, codeOK, Replay},
		{StateDone, codeRejected, Replay},
		{StateSent, "", InProgress},
		{StateUnknown, codeTimeout, Unknown},
		{StateFailed, codeNoConnect, Owned},
	} {
		t.Run(string(tc.state)+"/"+tc.code, func(t *testing.T) {
			r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
			seed(t, l, r, tc.state, tc.code)

			// A retry: same TX_CODE and body, a later SENT_AT.
			retry := request(txTransfer, r.GUID, sentAt2, bodyA)
			c, err := l.Claim(ctx, retry)
			assert.NilError(t, err)
			assert.Equal(t, c.Outcome, tc.want)
			assert.Equal(t, c.State, tc.state)
			assert.Equal(t, c.RspCode, tc.code)

			row, err := l.Get(ctx, r.GUID)
			assert.NilError(t, err)
			switch tc.state {
			case StateDone:
				assert.DeepEqual(t, c.Response, responseFrame(r.GUID, tc.code))
				assert.DeepEqual(t, c.Response, row.Response)
				assert.Equal(t, c.Attempts, 1)
			case StateFailed:
				assert.Equal(t, c.Attempts, 2)
				assert.Equal(t, row.State, StateSent)
				assert.Equal(t, row.Attempts, 2)
				// The stored request stays the first one.
				assert.DeepEqual(t, row.Request, r.Frame)
			default:
				assert.Check(t, c.Response == nil)
				assert.Equal(t, row.State, tc.state) // unchanged
				assert.Equal(t, row.Attempts, 1)
			}
		})
	}
}

// The fingerprint is checked on every path that finds a row (the
// Powertools bug was skipping it on the fast path).
func TestClaimReusedOnEveryState(t *testing.T) {
	eachStore(t, testClaimReusedOnEveryState)
}

func testClaimReusedOnEveryState(t *testing.T, l *Ledger) {
	ctx := context.Background()

	for _, tc := range []struct {
		state State
		code  string
	}{
		{StateDone, codeOK},
		{StateSent, ""},
		{StateUnknown, codeTimeout},
		{StateFailed, codeNoConnect},
	} {
		for _, other := range []struct {
			name string
			r    func(guid string) Request
		}{
			{"different body", func(g string) Request { return request(txTransfer, g, sentAt1, bodyB) }},
			{"different tx_code", func(g string) Request { return request(txInquiry, g, sentAt1, bodyA) }},
			{"shorter body", func(g string) Request { return request(txTransfer, g, sentAt1, bodyA[:17]) }},
		} {
			t.Run(string(tc.state)+"/"+other.name, func(t *testing.T) {
				r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
				seed(t, l, r, tc.state, tc.code)
				before, err := l.Get(ctx, r.GUID)
				assert.NilError(t, err)

				c, err := l.Claim(ctx, other.r(r.GUID))
				assert.NilError(t, err)
				assert.Equal(t, c.Outcome, Reused)
				assert.Equal(t, c.State, tc.state)
				assert.Check(t, c.Response == nil, "a reused GUID must not get the stored response")

				after, err := l.Get(ctx, r.GUID)
				assert.NilError(t, err)
				assert.DeepEqual(t, after, before) // nothing changed
			})
		}
	}
}

func TestClaimSameBodyDifferentHeaderIsNotReused(t *testing.T) {
	eachStore(t, func(t *testing.T, l *Ledger) {
		ctx := context.Background()
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		seed(t, l, r, StateDone, codeOK)

		retry := request(txTransfer, r.GUID, sentAt2, bodyA)
		assert.Check(t, string(retry.Frame) != string(r.Frame))
		c, err := l.Claim(ctx, retry)
		assert.NilError(t, err)
		assert.Equal(t, c.Outcome, Replay)
	})
}

func TestClaimRejectsBadRequest(t *testing.T) {
	eachStore(t, testClaimRejectsBadRequest)
}

func testClaimRejectsBadRequest(t *testing.T, l *Ledger) {
	ctx := context.Background()
	r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)

	bad := r
	bad.Body = []byte("not the tail")
	_, err := l.Claim(ctx, bad)
	assert.ErrorContains(t, err, "not the tail")

	bad = r
	bad.GUID = ""
	_, err = l.Claim(ctx, bad)
	assert.ErrorContains(t, err, "empty guid")

	_, err = l.Get(ctx, r.GUID)
	assert.Check(t, errors.Is(err, ErrNotFound))
}

func TestClaimReceivedIsInProgress(t *testing.T) {
	eachStore(t, func(t *testing.T, l *Ledger) {
		ctx := context.Background()
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		db := raw(t, l)
		db.Exec(`INSERT INTO tx(guid, tx_code, state, rsp_code, request, response, attempts, updated_at)
VALUES (?, ?, 'RECEIVED', '', ?, NULL, 1, `+db.Now()+`)`, r.GUID, r.TxCode, r.Frame)
		c, err := l.Claim(ctx, r)
		assert.NilError(t, err)
		assert.Equal(t, c.Outcome, InProgress)
		assert.Equal(t, c.State, StateReceived)
	})
}

func TestClaimCancelledContextWritesNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, l *Ledger) {
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := l.Claim(ctx, r)
		assert.Check(t, errors.Is(err, context.Canceled))
		_, err = l.Get(context.Background(), r.GUID)
		assert.Check(t, errors.Is(err, ErrNotFound))
	})
}

// A caller that gives up while its op is still queued (the writer busy with
// another batch) gets its context's error, and the op never runs.
func TestClaimCancelledWhileQueued(t *testing.T) {
	eachStore(t, testClaimCancelledWhileQueued)
}

func testClaimCancelledWhileQueued(t *testing.T, l *Ledger) {
	release := blockWriter(t, l)

	r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := l.Claim(ctx, r)
	assert.Check(t, errors.Is(err, context.DeadlineExceeded))
	release()

	// Wait for the writer to have drained the cancelled op.
	assert.NilError(t, l.Ping(context.Background()))
	_, err = l.Get(context.Background(), r.GUID)
	assert.Check(t, errors.Is(err, ErrNotFound))
}

// blockWriter parks the writer goroutine inside an op until the returned
// function is called, so that the ops queued meanwhile form one batch.
func blockWriter(t *testing.T, l *Ledger) (release func()) {
	t.Helper()
	started := make(chan struct{})
	unblock := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- l.st.do(context.Background(), operation{run: opFunc(func(stmts) error {
			close(started)
			<-unblock
			return nil
		})})
	}()
	<-started
	var released bool
	release = func() {
		if !released {
			released = true
			close(unblock)
			assert.Check(t, <-done)
		}
	}
	t.Cleanup(release)
	return release
}

func TestFinish(t *testing.T) {
	eachStore(t, testFinish)
}

func testFinish(t *testing.T, l *Ledger) {
	ctx := context.Background()
	r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	seed(t, l, r, StateSent, "")

	resp := responseFrame(r.GUID, codeOK)
	assert.NilError(t, l.Finish(ctx, r.GUID, 1, Outcome{Why: Why{Reason: "test"}, State: StateDone, RspCode: codeOK, Response: resp}))
	row, err := l.Get(ctx, r.GUID)
	assert.NilError(t, err)
	assert.Equal(t, row.State, StateDone)
	assert.Equal(t, row.RspCode, codeOK)
	assert.DeepEqual(t, row.Response, resp)

	// The row is no longer SENT: a second Finish changes nothing.
	err = l.Finish(ctx, r.GUID, 1, Outcome{Why: Why{Reason: "test"}, State: StateUnknown, RspCode: codeTimeout})
	assert.Check(t, errors.Is(err, ErrStateChanged))
	var se *StateError
	assert.Assert(t, errors.As(err, &se))
	assert.Equal(t, se.Found, StateDone)
	assert.Equal(t, se.Want, StateSent)
	assert.Check(t, is.ErrorContains(err, "ledger: finish "+r.GUID))
	row2, err := l.Get(ctx, r.GUID)
	assert.NilError(t, err)
	assert.DeepEqual(t, row2, row)

	// Missing row: ErrStateChanged and ErrNotFound.
	err = l.Finish(ctx, testkit.GUID(), 1, Outcome{Why: Why{Reason: "test"}, State: StateDone, RspCode: codeOK, Response: resp})
	assert.Check(t, errors.Is(err, ErrStateChanged))
	assert.Check(t, errors.Is(err, ErrNotFound))

	// Finishing to SENT or to a bogus state is a programming error.
	assert.ErrorContains(t, l.Finish(ctx, r.GUID, 1, Outcome{Why: Why{Reason: "test"}, State: StateSent, RspCode: ""}), "cannot finish")
	assert.ErrorContains(t, l.Finish(ctx, r.GUID, 1, Outcome{Why: Why{Reason: "test"}, State: "BOGUS", RspCode: ""}), "cannot finish")
}

func TestTransitionIsConditional(t *testing.T) {
	eachStore(t, testTransitionIsConditional)
}

func testTransitionIsConditional(t *testing.T, l *Ledger) {
	ctx := context.Background()
	r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	seed(t, l, r, StateUnknown, codeTimeout)

	resp := responseFrame(r.GUID, codeOK)
	err := l.Transition(ctx, r.GUID, StateFailed, Outcome{Why: Why{Reason: "test"}, State: StateDone, RspCode: codeOK, Response: resp})
	assert.Check(t, errors.Is(err, ErrStateChanged))
	var se *StateError
	assert.Assert(t, errors.As(err, &se))
	assert.Equal(t, se.Found, StateUnknown)

	// DONE without a response frame would make every retry fail.
	assert.ErrorContains(t, l.Transition(ctx, r.GUID, StateUnknown, Outcome{Why: Why{Reason: "test"}, State: StateDone, RspCode: codeOK}), "needs its response")

	assert.NilError(t, l.Transition(ctx, r.GUID, StateUnknown, Outcome{Why: Why{Reason: "test"}, State: StateDone, RspCode: codeOK, Response: resp}))
	row, err := l.Get(ctx, r.GUID)
	assert.NilError(t, err)
	assert.Equal(t, row.State, StateDone)
	assert.Equal(t, row.RspCode, codeOK)
	assert.DeepEqual(t, row.Response, resp)

	// A second resolver racing the first finds it settled.
	err = l.Transition(ctx, r.GUID, StateUnknown, Outcome{Why: Why{Reason: "test"}, State: StateFailed, RspCode: codeNoConnect})
	assert.Check(t, errors.Is(err, ErrStateChanged))

	assert.ErrorContains(t, l.Transition(ctx, r.GUID, StateDone, Outcome{Why: Why{Reason: "test"}, State: "BOGUS", RspCode: ""}), "invalid state")
}

func TestReclaim(t *testing.T) {
	eachStore(t, testReclaim)
}

func testReclaim(t *testing.T, l *Ledger) {
	ctx := context.Background()
	r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	seed(t, l, r, StateFailed, codeNoConnect)

	a, err := l.Reclaim(ctx, r.GUID)
	assert.NilError(t, err)
	assert.Equal(t, a, 2)
	row, err := l.Get(ctx, r.GUID)
	assert.NilError(t, err)
	assert.Equal(t, row.State, StateSent)
	assert.Equal(t, row.Attempts, 2)

	// Now SENT: a second re-claim must not succeed.
	_, err = l.Reclaim(ctx, r.GUID)
	assert.Check(t, errors.Is(err, ErrStateChanged))

	// ReclaimBelow enforces the attempts limit in the same statement.
	assert.NilError(t, l.Finish(ctx, r.GUID, 2, Outcome{Why: Why{Reason: "test"}, State: StateFailed, RspCode: codeNoConnect}))
	_, err = l.ReclaimBelow(ctx, r.GUID, 2)
	assert.Check(t, errors.Is(err, ErrStateChanged))
	assert.ErrorContains(t, err, "attempts limit 2")
	a, err = l.ReclaimBelow(ctx, r.GUID, 3)
	assert.NilError(t, err)
	assert.Equal(t, a, 3)

	_, err = l.Reclaim(ctx, testkit.GUID())
	assert.Check(t, errors.Is(err, ErrNotFound))
}

// ReclaimSelected takes a row only as it was selected: a row re-claimed
// since, even one whose resend came back FAILED/E902, or whose rsp_code
// changed, is left alone; the row as read is taken, and the limit holds.
func TestReclaimSelected(t *testing.T) {
	eachStore(t, testReclaimSelected)
}

func testReclaimSelected(t *testing.T, l *Ledger) {
	ctx := context.Background()
	r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	seed(t, l, r, StateFailed, codeNoConnect)
	selected, err := l.Get(ctx, r.GUID)
	assert.NilError(t, err)

	// Another sender re-claims it, and its resend fails to connect again.
	a, err := l.Reclaim(ctx, r.GUID)
	assert.NilError(t, err)
	assert.NilError(t, l.Finish(ctx, r.GUID, a, Outcome{Why: Why{Reason: "test"}, State: StateFailed, RspCode: codeNoConnect}))
	_, err = l.ReclaimSelected(ctx, selected, 5)
	assert.Check(t, errors.Is(err, ErrStateChanged), "err %v", err)
	assert.ErrorContains(t, err, "changed since it was selected")
	row, err := l.Get(ctx, r.GUID)
	assert.NilError(t, err)
	assert.Equal(t, row.State, StateFailed)
	assert.Equal(t, row.Attempts, a)

	// The row as it is now is taken once, within the limit.
	_, err = l.ReclaimSelected(ctx, row, row.Attempts)
	assert.Check(t, errors.Is(err, ErrStateChanged), "at the limit: %v", err)
	got, err := l.ReclaimSelected(ctx, row, 5)
	assert.NilError(t, err)
	assert.Equal(t, got, row.Attempts+1)
	_, err = l.ReclaimSelected(ctx, row, 5)
	assert.Check(t, errors.Is(err, ErrStateChanged), "SENT now: %v", err)

	// Another rsp_code with the same attempts is not the row selected.
	other := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	seed(t, l, other, StateFailed, codeNoConnect)
	sel, err := l.Get(ctx, other.GUID)
	assert.NilError(t, err)
	sel.RspCode = codeOK
	_, err = l.ReclaimSelected(ctx, sel, 5)
	assert.Check(t, errors.Is(err, ErrStateChanged), "err %v", err)
}

// One op whose statements fail is undone alone; the other ops of the same
// batch commit (the batch is rolled back and its ops run one by one).
func TestFailingOpDoesNotSpoilItsBatch(t *testing.T) {
	eachStore(t, testFailingOpDoesNotSpoilItsBatch)
}

func testFailingOpDoesNotSpoilItsBatch(t *testing.T, l *Ledger) {
	ctx := context.Background()
	release := blockWriter(t, l)
	commitsBefore := l.Commits()

	good1 := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	good2 := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	partial := testkit.GUID()
	results := make(chan error, 3)
	go func() { _, err := l.Claim(ctx, good1); results <- err }()
	waitQueued(t, l, 1)
	go func() {
		results <- l.st.do(ctx, operation{run: opFunc(func(tx stmts) error {
			// A first write that succeeds, then one the CHECK refuses: the
			// first one must be taken back too.
			entry := func(s scanner) (pending, error) {
				var g string
				return pending{guid: g, why: Why{Reason: "test"}}, s.Scan(&g)
			}
			if _, err := tx.change(`INSERT INTO tx(guid, state) VALUES (?, 'SENT') RETURNING guid`, []any{partial}, entry); err != nil {
				return err
			}
			_, err := tx.change(`INSERT INTO tx(guid, state) VALUES (?, 'BOGUS') RETURNING guid`, []any{testkit.GUID()}, entry)
			return err
		})})
	}()
	waitQueued(t, l, 2)
	go func() { _, err := l.Claim(ctx, good2); results <- err }()
	waitQueued(t, l, 3)
	release()

	var failed int
	for i := 0; i < 3; i++ {
		if err := <-results; err != nil {
			assert.Check(t, strings.Contains(strings.ToLower(err.Error()), "check constraint"), "%v", err)
			failed++
		}
	}
	assert.Equal(t, failed, 1)
	// The blocking op's batch, then the two good ops alone (the slow path).
	assert.Equal(t, l.Commits()-commitsBefore, uint64(3))

	for _, g := range []string{good1.GUID, good2.GUID} {
		row, err := l.Get(ctx, g)
		assert.NilError(t, err)
		assert.Equal(t, row.State, StateSent)
	}
	_, err := l.Get(ctx, partial)
	assert.Check(t, errors.Is(err, ErrNotFound), "the failing op's first insert was not undone")
}

// queued is how many ops sit in the writer's queue, and room how many it
// holds.
func queued(l *Ledger) int { return len(writerQueue(l).ops) }
func room(l *Ledger) int   { return cap(writerQueue(l).ops) }

func writerQueue(l *Ledger) *queue {
	switch st := l.st.(type) {
	case *sqliteStore:
		return &st.queue
	case *pgStore:
		return &st.queue
	}
	panic("unknown store")
}

// waitQueued waits until n ops sit in the writer's queue.
func waitQueued(t *testing.T, l *Ledger, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for queued(l) < n {
		if time.Now().After(deadline) {
			t.Fatalf("queue has %d ops, want %d", queued(l), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Peek answers from a read what Claim would for a row that needs no claim,
// NeedsClaim for a GUID without a row or with a FAILED row, checks the
// fingerprint on every path, and writes nothing.
func TestPeek(t *testing.T) {
	eachStore(t, testPeek)
}

func testPeek(t *testing.T, l *Ledger) {
	ctx := context.Background()
	for _, tc := range []struct {
		state State
		code  string
		want  ClaimOutcome
	}{
		{StateDone, codeOK, Replay},
		{StateSent, "", InProgress},
		{StateUnknown, codeTimeout, Unknown},
		{StateFailed, codeNoConnect, NeedsClaim},
	} {
		t.Run(string(tc.state), func(t *testing.T) {
			r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
			seed(t, l, r, tc.state, tc.code)
			before, err := l.Get(ctx, r.GUID)
			assert.NilError(t, err)

			c, err := l.Peek(ctx, request(txTransfer, r.GUID, sentAt2, bodyA))
			assert.NilError(t, err)
			assert.Equal(t, c.Outcome, tc.want)
			assert.Equal(t, c.State, tc.state)
			assert.Equal(t, c.RspCode, tc.code)
			assert.Equal(t, c.Attempts, 1)
			if tc.state == StateDone {
				assert.DeepEqual(t, c.Response, before.Response)
			} else {
				assert.Check(t, c.Response == nil)
			}

			c, err = l.Peek(ctx, request(txTransfer, r.GUID, sentAt1, bodyB))
			assert.NilError(t, err)
			assert.Equal(t, c.Outcome, Reused)
			assert.Check(t, c.Response == nil, "a reused GUID must not get the stored response")

			after, err := l.Get(ctx, r.GUID)
			assert.NilError(t, err)
			assert.DeepEqual(t, after, before) // nothing changed
		})
	}

	fresh := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	c, err := l.Peek(ctx, fresh)
	assert.NilError(t, err)
	assert.Equal(t, c.Outcome, NeedsClaim)
	_, err = l.Get(ctx, fresh.GUID)
	assert.ErrorIs(t, err, ErrNotFound, "Peek wrote a row")

	_, err = l.Peek(ctx, Request{GUID: "x"})
	assert.ErrorContains(t, err, "empty request frame")
}
