package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"lhrelay/internal/plant"
	"strconv"
	"sync"
	"time"
)

// The state machine's statements, in SQL both stores accept. Every write is
// one statement, and every transition is conditional on the state it
// expects (SPEC 6).
//
// A statement on one row in a given state tests the state as
// "(state = ?) IS TRUE": in a WHERE it means state = ?, but no index can
// serve it, so the row is found by its GUID (tx_pkey) alone. Otherwise
// PostgreSQL's generic plan, made while the table is empty and kept for
// the connection's life, takes the state and the GUID from
// tx_state_updated_at (state, updated_at, guid) and scans every entry of
// that state, dead ones included: each outcome costs more with every
// transfer written until a vacuum (TestPostgresFindsARowByItsKey).
const (
	// The claim: one statement, never "select, then insert".
	// claim_token is the claim's own (newClaimToken), so that an abandon
	// takes only its own claim's row (AbandonClaim).
	// hist_key is the row's key for its history (schema.sql, version 3).
	sqlClaimInsert = `INSERT INTO tx(guid, tx_code, state, rsp_code, request, response, attempts, updated_at, claim_token, hist_key)
VALUES (?, ?, 'SENT', '', ?, NULL, 1, CURRENT_TIMESTAMP, ?, ?)
ON CONFLICT(guid) DO NOTHING`

	sqlClaimExisting = `SELECT tx_code, state, rsp_code, request, response, attempts FROM tx WHERE guid = ?`

	// FAILED → SENT, in one conditional statement, with the new claim's
	// token. rsp_code is left as it was, so RETURNING gives the one before.
	sqlReclaim = `UPDATE tx SET state = 'SENT', attempts = COALESCE(attempts, 0) + 1, updated_at = CURRENT_TIMESTAMP, claim_token = ?
WHERE guid = ? AND (state = 'FAILED') IS TRUE RETURNING attempts, rsp_code`

	sqlReclaimBelow = `UPDATE tx SET state = 'SENT', attempts = COALESCE(attempts, 0) + 1, updated_at = CURRENT_TIMESTAMP, claim_token = ?
WHERE guid = ? AND (state = 'FAILED') IS TRUE AND COALESCE(attempts, 0) < ? RETURNING attempts, rsp_code`

	// sqlReclaimBelow, and only while the row is as it was selected.
	sqlReclaimSelected = `UPDATE tx SET state = 'SENT', attempts = COALESCE(attempts, 0) + 1, updated_at = CURRENT_TIMESTAMP, claim_token = ?
WHERE guid = ? AND (state = 'FAILED') IS TRUE AND COALESCE(attempts, 0) < ? AND (rsp_code = ?) IS TRUE AND COALESCE(attempts, 0) = ? RETURNING attempts, rsp_code`

	// A transition. SET expressions see the row as it was, so
	// prev_rsp_code keeps the rsp_code replaced, and sqlReturnBefore gives
	// it to the history in the same statement, under the row's lock
	// (dialect.readsBefore: or sqlRowBefore reads it first).
	sqlTransition = `UPDATE tx SET prev_rsp_code = rsp_code, state = ?, rsp_code = ?, response = ?, updated_at = CURRENT_TIMESTAMP
WHERE guid = ? AND (state = ?) IS TRUE`
	sqlReturnBefore        = ` RETURNING attempts, prev_rsp_code`
	sqlTransitionReturning = sqlTransition + sqlReturnBefore
	sqlRowBefore           = `SELECT attempts, rsp_code FROM tx WHERE guid = ? AND (state = ?) IS TRUE`

	// A transition of one claim's row: conditional on the state and on
	// the attempts of that claim, so that an answer to an earlier attempt
	// never lands on a later claim of the row.
	sqlTransitionOfClaim = sqlTransition + ` AND attempts = ?`
	sqlRowBeforeOfClaim  = sqlRowBefore + ` AND attempts = ?`

	sqlTransitionOfClaimReturning = sqlTransitionOfClaim + sqlReturnBefore

	// The transition of a first claim's row whose rsp_code is still the
	// empty one the claim's INSERT wrote: when it changes the row, the
	// before state is known without reading it (dialect.readsBefore).
	sqlTransitionOfFreshClaim = sqlTransitionOfClaim + ` AND rsp_code = ''`

	sqlStateAttemptsOf = `SELECT state, attempts FROM tx WHERE guid = ?`

	// The history entry a claim's transition writes: found, it proves the
	// transition committed (the entry is written in its transaction).
	sqlLandedEntry = `SELECT COUNT(*) FROM history WHERE guid = ? AND chain = ? AND attempts = ?
AND state_before = ? AND state_after = ? AND rsp_after = ? AND reason = ?`

	sqlOutcomeOf = `SELECT state, rsp_code, response FROM tx WHERE guid = ?`
)

// purgeChunkSQL deletes one chunk of the DONE rows before the cut (cond is
// the dialect's). In chunks: one huge DELETE would hold the write lock (or
// its rows' locks) for as long as it runs, and claims would wait behind it.
func purgeChunkSQL(d *dialect, cond string) string {
	return `DELETE FROM tx WHERE guid IN
(SELECT guid FROM tx WHERE state = 'DONE' AND ` + cond + ` LIMIT ?` + d.skipLocked + `)
RETURNING guid, state, rsp_code, attempts, hist_key`
}

// The reasons the ledger gives for the changes it decides itself; the
// others (outcomes, settling) are their callers' (Outcome.Why).
const (
	reasonClaimed   = "claimed: new GUID"
	reasonReclaimed = "re-claimed by the channel's resend"
)

// ConflictReason starts the reason of the entry that records an outcome
// refused because its row was re-claimed since (ErrReclaimed): the
// transfer may be posted twice. Audit counts these entries.
const ConflictReason = "conflict: "

// reclaimed is the entry of a FAILED → SENT re-claim whose RETURNING s holds.
func reclaimed(guid, reason string, attempts *int64) func(scanner) (pending, error) {
	return func(s scanner) (pending, error) {
		var rsp nullString
		if err := s.Scan(attempts, &rsp); err != nil {
			return pending{}, err
		}
		return pending{guid: guid, stateBefore: StateFailed, rspBefore: rsp.String, stateAfter: StateSent, rspAfter: rsp.String,
			attempts: int(*attempts), why: Why{Reason: reason}}, nil
	}
}

// purgeChunk is how many rows one purge transaction deletes.
const purgeChunk = 1000

func (r Request) validate() error {
	if r.GUID == "" {
		return errors.New("empty guid")
	}
	if len(r.Frame) == 0 {
		return errors.New("empty request frame")
	}
	// The fingerprint compares the tail of the stored frame with Body, so
	// Body must really be Frame's tail.
	if !bytes.HasSuffix(r.Frame, r.Body) {
		return errors.New("request body is not the tail of the frame")
	}
	return nil
}

// sameRequest is the fingerprint check: the same TX_CODE and the same body.
// Headers are fixed-length, so equal frame lengths and equal tails mean
// equal bodies; the header's GUID and SENT_AT may differ on a retry.
func sameRequest(storedTxCode string, stored []byte, r Request) bool {
	return storedTxCode == r.TxCode &&
		len(stored) == len(r.Frame) &&
		bytes.Equal(stored[len(stored)-len(r.Body):], r.Body)
}

// Claim decides, in one transaction of the writer, whether this request
// owns its GUID (SPEC 6), and returns only once that decision is committed
// to disk. A new GUID is inserted as SENT with attempts 1 (Owned). For an
// existing row the fingerprint (TX_CODE and body) is checked first, on every
// path: a different request is Reused whatever the state. Then DONE →
// Replay with the stored response, SENT or RECEIVED → InProgress, UNKNOWN →
// Unknown, FAILED → re-claimed to SENT with attempts+1 (Owned), or
// InProgress if the conditional UPDATE found it taken. Claim never waits for
// another request of the same GUID.
//
// On error the Claim is zero (its Outcome is not Owned) and the core must
// not be called.
func (l *Ledger) Claim(ctx context.Context, r Request) (Claim, error) {
	if err := r.validate(); err != nil {
		return Claim{}, fmt.Errorf("ledger: claim %s: %w", r.GUID, err)
	}
	if plant.On(plant.ClaimSelectInsert) {
		if c, ok := l.claimSelectInsert(ctx, r); ok {
			return c, nil
		}
	}
	token := l.newClaimToken()
	// A key that grows with time, so that the row's entries go to the
	// last pages of history's index on it (schema.sql, version 3).
	key := time.Now().UnixMicro()
	cr := claimRuns.Get().(*claimRun)
	cr.r, cr.key = r, key
	cr.args = [5]any{r.GUID, recurring.box(r.TxCode), r.Frame, token, key}
	err := l.st.do(ctx, operation{guid: r.GUID, guidArg: cr.args[0], keyArg: cr.args[4], run: cr})
	c := cr.c
	cr.recycle()
	if err != nil {
		l.countError(opClaim, err)
		if errors.Is(err, ErrUnconfirmed) && c.Outcome == Owned {
			// The row may exist, SENT, with these attempts and this
			// token: the caller must be able to abandon it (AbandonClaim).
			err = &UnconfirmedClaimError{GUID: r.GUID, Attempts: c.Attempts, Token: token, Err: err}
		}
		return Claim{}, fmt.Errorf("ledger: claim %s: %w", r.GUID, err)
	}
	return c, nil
}

// claimRun is a claim's operation: its request and arguments, and its
// result once run. Claims are pooled (claimRuns): a closure and its
// captured variables, its arguments' slice and its boxes were a fifth of
// a transfer's allocations. The store is done with it once do returned.
type claimRun struct {
	r   Request
	key int64 // the row's hist_key
	// args are sqlClaimInsert's: the GUID, TX_CODE, the frame, the
	// claim's token and the key.
	args [5]any
	c    Claim
}

var claimRuns = sync.Pool{New: func() any { return new(claimRun) }}

// recycle gives cr back to claimRuns, as new.
func (cr *claimRun) recycle() {
	*cr = claimRun{}
	claimRuns.Put(cr)
}

// run is the claim: it may run again (after a rollback), and then
// decides afresh.
func (cr *claimRun) run(tx stmts) error {
	r := cr.r
	cr.c = Claim{}
	var row existingRow
	// A row deleted between the INSERT that found it and the SELECT
	// (purge, on a store where those are two transactions) is gone:
	// claim again. Twice is enough, since purge only takes old rows.
	for try := 0; ; try++ {
		n, err := tx.changeOne(sqlClaimInsert, cr.args[:],
			pending{guid: r.GUID, stateAfter: StateSent, attempts: 1, why: Why{Reason: reasonClaimed}, key: cr.key})
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		if n == 1 {
			cr.c = Claim{Outcome: Owned, Attempts: 1}
			return nil
		}
		row, err = readExisting(tx, r.GUID)
		if errors.Is(err, errNoRows) && try < 2 {
			continue
		}
		if err != nil {
			return fmt.Errorf("read existing row: %w", err)
		}
		break
	}
	found, err := decideExisting(r, row.txCode.String, State(row.state.String), row.rspCode.String, row.request, row.response, int(row.attempts.Int64))
	if err != nil {
		return err
	}
	if found.Outcome == NeedsClaim {
		var a int64
		n, err := tx.change(sqlReclaim, []any{cr.args[3], r.GUID}, reclaimed(r.GUID, reasonReclaimed, &a))
		switch {
		case err == nil && n == 0:
			// Another relay (or, on SQLite, nobody: the writer holds
			// the write lock) took it first: the statement is
			// conditional, so the answer is too.
			found.Outcome = InProgress
		case err != nil:
			return fmt.Errorf("re-claim FAILED row: %w", err)
		default:
			found.Outcome = Owned
			found.Attempts = int(a)
		}
	}
	cr.c = found
	return nil
}

// existingRow is what a claim reads of a row it found.
type existingRow struct {
	txCode, state, rspCode nullString
	request, response      []byte
	attempts               nullInt
}

// readExisting reads the row a claim found. Its variables live here, not
// in Claim, so that a claim that inserts its row never allocates them.
func readExisting(tx stmts, guid string) (existingRow, error) {
	var r existingRow
	err := tx.queryRow(sqlClaimExisting, guid).Scan(&r.txCode, &r.state, &r.rspCode, &r.request, &r.response, &r.attempts)
	return r, err
}

// decideExisting is the rule for a row that exists, shared by Claim and
// Peek so that both check the fingerprint first, on every path: a
// different request is Reused whatever the state; then DONE → Replay,
// SENT or RECEIVED → InProgress, UNKNOWN → Unknown, FAILED → NeedsClaim
// (only a write can take it).
func decideExisting(r Request, txCode string, state State, rspCode string, request, response []byte, attempts int) (Claim, error) {
	found := Claim{State: state, RspCode: rspCode, Attempts: attempts}
	if !sameRequest(txCode, request, r) {
		found.Outcome = Reused
		return found, nil
	}
	switch state {
	case StateDone:
		if len(response) == 0 {
			return Claim{}, fmt.Errorf("row is DONE but has no stored response")
		}
		found.Outcome = Replay
		found.Response = response
	case StateSent, StateReceived:
		found.Outcome = InProgress
	case StateUnknown:
		found.Outcome = Unknown
	case StateFailed:
		found.Outcome = NeedsClaim
	default:
		return Claim{}, fmt.Errorf("row has unknown state %q", state)
	}
	return found, nil
}

// Peek answers a request from a read alone, writing nothing: for a row
// whose answer needs no claim it is what Claim would answer (Replay,
// InProgress, Unknown, Reused); for a GUID with no row, or a FAILED row,
// it is NeedsClaim, since only Claim's write can give the request the
// GUID. It reads through the read connections, so it answers while the
// writer cannot write (a full disk, a read-only database) and costs no
// commit. What it reads may be overtaken by a concurrent claim; every
// outcome it gives is still true of the request at the time of the read,
// and none lets the core be called.
func (l *Ledger) Peek(ctx context.Context, r Request) (Claim, error) {
	if err := r.validate(); err != nil {
		return Claim{}, fmt.Errorf("ledger: peek %s: %w", r.GUID, err)
	}
	if l.isClosed.Load() {
		return Claim{}, fmt.Errorf("ledger: peek %s: %w", r.GUID, ErrClosed)
	}
	var (
		txCode, state, rspCode nullString
		request, response      []byte
		attempts               nullInt
	)
	err := l.st.read().queryRow(ctx, sqlClaimExisting, r.GUID).Scan(&txCode, &state, &rspCode, &request, &response, &attempts)
	if errors.Is(err, errNoRows) {
		return Claim{Outcome: NeedsClaim}, nil
	}
	if err == nil {
		var c Claim
		c, err = decideExisting(r, txCode.String, State(state.String), rspCode.String, request, response, int(attempts.Int64))
		if err == nil {
			return c, nil
		}
	}
	l.countError(opRead, err)
	return Claim{}, fmt.Errorf("ledger: peek %s: %w", r.GUID, err)
}

// Finish records the outcome of an owned request, the claim that made
// attempts: SENT → o.State (DONE, UNKNOWN or FAILED) with the response code
// and the response frame as sent (DONE requires one: it is what a retry
// gets replayed).
//
// The core's answer is the truth (SPEC 6): if the row was settled FAILED
// while the call was under way (a lookup that came too early said "never
// posted") and nobody has re-claimed it since (same attempts), the answer
// is recorded over it (a late answer, counted by LateAnswers). If the row
// was re-claimed since, nothing changes and the error matches ErrReclaimed
// (and ErrStateChanged): the transfer may now be posted twice, and the
// caller must report it. Any other row (not SENT, missing) changes nothing
// and the error is a *StateError matching ErrStateChanged.
func (l *Ledger) Finish(ctx context.Context, guid string, attempts int, o Outcome) error {
	f := finishRuns.Get().(*finishRun)
	err := f.init(l, guid, attempts, o, o.Response)
	if err == nil {
		err = l.st.do(ctx, operation{guid: guid, guidArg: f.t.args[3], run: f, rerunnable: true})
		f.counted(err)
		l.countError(opFinish, err)
	}
	f.recycle()
	if err != nil {
		return fmt.Errorf("ledger: finish %s: %w", guid, err)
	}
	return nil
}

// FinishLater is Finish without the wait: it queues the same transition and
// returns at once. then is called with Finish's result once the transition
// has committed, or has failed: on the writer goroutine, so it must be
// quick and must not call the Ledger. response is copied. ctx bounds only
// the wait for room in the writer's queue, when it is full; once queued,
// the transition runs whatever becomes of ctx, and Close runs every
// transition queued before it. If FinishLater returns an error (a state
// Finish does not take, ctx ended while the queue was full, the Ledger
// closed) nothing was queued and then is never called.
//
// It is for an answer that does not depend on the outcome being recorded
// (the relay's 0000, E901 and E902; see its package comment): the caller
// can answer while the commit is on its way.
func (l *Ledger) FinishLater(ctx context.Context, guid string, attempts int, o Outcome, then func(error)) error {
	f := finishRuns.Get().(*finishRun)
	err := f.init(l, guid, attempts, o, f.copyResponse(o.Response))
	if err == nil {
		f.then = then
		err = l.st.enqueue(ctx, operation{guid: guid, guidArg: f.t.args[3], run: f, rerunnable: true}, f)
	}
	if err != nil {
		f.recycle()
		return fmt.Errorf("ledger: finish %s: %w", guid, err)
	}
	return nil
}

// finishOp checks an outcome and returns the operation that records it
// (finishRun.run) and the function its final result must be given to
// (finishRun.counted).
func (l *Ledger) finishOp(guid string, attempts int, o Outcome) (run opFunc, counted func(error), err error) {
	f := new(finishRun)
	if err := f.init(l, guid, attempts, o, o.Response); err != nil {
		return nil, nil, err
	}
	return f.run, f.counted, nil
}

// finishRun is an outcome's operation: the outcome (SENT → to), else the
// late answer (FAILED → to), both of the claim that made attempts. Every
// transfer has one, so they are pooled (finishRuns), each keeping its
// copy of FinishLater's response from one use to the next.
type finishRun struct {
	l *Ledger
	t transitionRun
	// late: the run whose write stands recorded a late answer; read once
	// the operation is over.
	late bool
	// then is FinishLater's callback (completed).
	then func(error)
	// resp is FinishLater's copy of the response, and respArg its box
	// (args[2]), both kept for the next use: a response of the same
	// length is boxed again only if the copy moved.
	resp    []byte
	respArg any
}

var finishRuns = sync.Pool{New: func() any { return new(finishRun) }}

// recycle gives f back to finishRuns, keeping only its response buffer.
func (f *finishRun) recycle() {
	*f = finishRun{resp: f.resp[:0], respArg: f.respArg}
	finishRuns.Put(f)
}

// copyResponse copies r into f's own buffer and returns it, boxed; nil
// stays nil (a NULL response).
func (f *finishRun) copyResponse(r []byte) any {
	if r == nil {
		return r
	}
	f.resp = append(f.resp[:0], r...)
	if b, ok := f.respArg.([]byte); ok && len(b) == len(f.resp) && len(b) > 0 && &b[0] == &f.resp[0] {
		return f.respArg
	}
	f.respArg = f.resp
	return f.respArg
}

// init checks an outcome and sets f up to record it; resp is o.Response
// as the statement's argument (boxed).
func (f *finishRun) init(l *Ledger, guid string, attempts int, o Outcome, resp any) error {
	switch o.State {
	case StateDone, StateUnknown, StateFailed:
	default:
		return fmt.Errorf("cannot finish to state %q", o.State)
	}
	if attempts < 1 {
		return fmt.Errorf("finish: attempts %d: want the claim's (1 or more)", attempts)
	}
	if b, ok := resp.([]byte); ok {
		o.Response = b
	}
	if err := f.t.init(l.st.dialect(), l.chain.actor.Instance, guid, StateSent, attempts, "", o); err != nil {
		return err
	}
	f.t.args[2] = resp
	f.l, f.late = l, false
	return nil
}

// counted must be called with the operation's final result: it counts a
// late answer or a conflict once, by the run whose result that is (a run
// after a lost COMMIT answer is not a second one).
func (f *finishRun) counted(err error) {
	switch {
	case err == nil && f.late:
		f.l.late.Add(1)
	case errors.Is(err, ErrReclaimed):
		f.l.conflicts.Add(1)
	}
}

// completed is FinishLater's end: the writer's call with the result.
func (f *finishRun) completed(err error) {
	f.counted(err)
	if err != nil {
		f.l.countError(opFinish, err)
		err = fmt.Errorf("ledger: finish %s: %w", f.t.guid, err)
	}
	then := f.then
	f.recycle()
	then(err)
}

func (f *finishRun) run(tx stmts) error {
	if !tx.rerun() {
		// A re-run that finds the first run's write landed keeps
		// what that run was; one that writes sets it below.
		f.late = false
	}
	err := f.t.run(tx)
	if err == nil {
		return nil
	}
	guid, attempts, o := f.t.guid, f.t.attempts, f.t.o
	var se *StateError
	if !errors.As(err, &se) || se.Found != StateFailed || se.FoundAttempts != attempts || plant.On(plant.ForgetLate200) {
		if se != nil && se.Reclaimed {
			// The row does not change, but its history must say what
			// the core answered an earlier attempt: the transfer may
			// now be posted twice.
			tx.note(pending{guid: guid, stateBefore: se.Found, stateAfter: se.Found, attempts: se.FoundAttempts,
				rspAfter: o.RspCode, why: Why{
					Reason: fmt.Sprintf(ConflictReason+"the core answered attempt %d (%s: %s) after the row was re-claimed (attempts %d); it may be posted twice",
						attempts, o.RspCode, o.Why.Reason, se.FoundAttempts),
					HTTPStatus: o.Why.HTTPStatus, Took: o.Why.Took}})
		}
		return err
	}
	// Settled FAILED while the call was under way (the lookup came
	// too early) and not re-claimed since: the core's answer is the
	// truth. The first statement wrote nothing, so this one is still
	// the operation's only write. (Built here: it is rare.)
	lateO := o
	lateO.Why.Reason = "late answer, recorded over FAILED (settled while the call was under way): " + o.Why.Reason
	lateOp, _ := claimTransitionOp(f.t.d, f.t.chain, guid, StateFailed, attempts, "", lateO)
	if err := lateOp(tx); err != nil {
		return err
	}
	f.late = true
	return nil
}

// AbandonClaim turns the row of a claim whose commit was not confirmed (an
// *UnconfirmedClaimError: the answer to its COMMIT was lost, or it did not
// become durable) and for which the core was not called, if it exists
// still SENT with that claim's attempts, into o (FAILED/E902: nothing was
// sent), so that the channel's resend is served instead of refused as in
// progress (SPEC 6). A row not in that state (the claim never landed, or
// it was settled since) changes nothing: the error matches ErrStateChanged.
func (l *Ledger) AbandonClaim(ctx context.Context, guid string, attempts int, token string, o Outcome) error {
	if o.State != StateFailed {
		return fmt.Errorf("ledger: abandon claim %s: to state %q: want FAILED", guid, o.State)
	}
	if token == "" {
		// Without its token the row found may be another claim's.
		return fmt.Errorf("ledger: abandon claim %s: no claim token", guid)
	}
	run, err := claimTransitionOp(l.st.dialect(), l.chain.actor.Instance, guid, StateSent, attempts, token, o)
	if err == nil {
		err = l.st.do(ctx, operation{guid: guid, run: run, rerunnable: true})
		l.countError(opTransition, err)
	}
	if err != nil {
		return fmt.Errorf("ledger: abandon claim %s (attempts %d): %w", guid, attempts, err)
	}
	return nil
}

// Transition moves a row from one state to another in one conditional
// UPDATE, setting rsp_code and response as given (nil stores NULL; DONE
// requires a response). It is
// for the batch commands (resolve: UNKNOWN or stale SENT → DONE or FAILED).
// If the row is not in from (or missing) nothing changes and the error is a
// *StateError matching ErrStateChanged.
func (l *Ledger) Transition(ctx context.Context, guid string, from State, o Outcome) error {
	return l.transition(ctx, guid, from, "", 0, o)
}

// transition runs one conditional transition (claimTransitionOp's chain
// and attempts) on the writer: Transition and TransitionOfAttempts.
func (l *Ledger) transition(ctx context.Context, guid string, from State, chain string, attempts int, o Outcome) error {
	if !from.Valid() || !o.State.Valid() {
		return fmt.Errorf("ledger: transition %s: invalid state %q → %q", guid, from, o.State)
	}
	run, err := claimTransitionOp(l.st.dialect(), chain, guid, from, attempts, "", o)
	if err == nil {
		err = l.st.do(ctx, operation{guid: guid, run: run, rerunnable: true})
		l.countError(opTransition, err)
	}
	if err != nil {
		if attempts > 0 {
			return fmt.Errorf("ledger: transition %s %s→%s (attempts %d): %w", guid, from, o.State, attempts, err)
		}
		return fmt.Errorf("ledger: transition %s %s→%s: %w", guid, from, o.State, err)
	}
	return nil
}

// claimTransitionOp returns the writer operation for one conditional
// transition from from to o; when attempts > 0 it also requires the row's
// attempts to be exactly that: the transition of one claim's row. Every
// transition of the state machine is one of these: a single UPDATE
// conditional on what it expects, its affected rows deciding.
//
// A token (with attempts > 0) also requires the row's claim_token: the row
// is then that one claim's, and no other claim's with the same attempts.
//
// chain names the history chain the operation's entries go to: a re-run
// of one claim's transition after a lost COMMIT answer looks there for the
// entry of its first run (sqlLandedEntry).
func claimTransitionOp(d *dialect, chain, guid string, from State, attempts int, token string, o Outcome) (opFunc, error) {
	t := new(transitionRun)
	if err := t.init(d, chain, guid, from, attempts, token, o); err != nil {
		return nil, err
	}
	t.args[2] = o.Response
	return t.run, nil
}

// transitionRun is one conditional transition (claimTransitionOp): what
// it expects, what it writes, and its statements' arguments. An outcome's
// is part of a pooled finishRun.
type transitionRun struct {
	d                *dialect
	chain, guid      string
	from             State
	attempts         int
	o                Outcome
	q, readQ         string
	returnQ, freshQ  string
	args             [7]any
	nargs            int
	readFrom, nreads int // args[readFrom:nargs] are readQ's
}

// init sets t up as claimTransitionOp describes.
func (t *transitionRun) init(d *dialect, chain, guid string, from State, attempts int, token string, o Outcome) error {
	if o.State == StateDone && len(o.Response) == 0 {
		// A DONE row is answered by replaying its response: without one
		// every retry of this GUID would fail.
		return errors.New("a DONE row needs its response frame")
	}
	if o.Why.Reason == "" {
		// The row's history says why it changed (SPEC 6b): a caller must.
		return errors.New("no reason given for the history (Outcome.Why)")
	}
	*t = transitionRun{d: d, chain: chain, guid: guid, from: from, attempts: attempts, o: o,
		q: sqlTransition, readQ: sqlRowBefore, returnQ: sqlTransitionReturning, freshQ: sqlTransitionOfFreshClaim}
	// Each value is boxed once and shared by both statements; numbers go
	// as int64, which database/sql passes on without reflection. The
	// response (args[2]) is the caller's to box: FinishLater's is kept
	// boxed from one use to the next (finishRun).
	t.args = [7]any{o.State.arg(), recurring.box(o.RspCode), nil, guid, from.arg()}
	t.nargs = 5
	switch {
	case attempts > 0 && token != "":
		// Rare (an abandon): built here.
		const ofToken = ` AND claim_token = ?`
		t.q, t.readQ = sqlTransitionOfClaim+ofToken, sqlRowBeforeOfClaim+ofToken
		t.returnQ, t.freshQ = t.q+sqlReturnBefore, t.q+` AND rsp_code = ''`
		t.args[5], t.args[6] = int64(attempts), token
		t.nargs = 7
	case attempts > 0:
		t.q, t.readQ, t.returnQ = sqlTransitionOfClaim, sqlRowBeforeOfClaim, sqlTransitionOfClaimReturning
		t.args[5] = int64(attempts)
		t.nargs = 6
	}
	t.readFrom = 3
	return nil
}

// entry is the transition's history entry, from the row's attempts and
// rsp_code before it.
func (t *transitionRun) entry(a nullInt, before nullString) pending {
	return pending{guid: t.guid, stateBefore: t.from, rspBefore: before.String, stateAfter: t.o.State, rspAfter: t.o.RspCode,
		attempts: int(a.Int64), why: t.o.Why}
}

func (t *transitionRun) run(tx stmts) error {
	var (
		n   int64
		err error
	)
	args := t.args[:t.nargs]
	attempts, o := t.attempts, &t.o
	if attempts == 1 {
		// Most often a first claim's row is as its INSERT left it
		// (SENT, one attempt, no response code): then one conditional
		// UPDATE that requires exactly that both changes it and proves
		// the entry's before state, with nothing to read or return. It
		// writes nothing otherwise, and the statements below decide.
		// A re-claimed row keeps the code of the attempt before
		// (sqlReclaim), so for it this statement would only miss.
		n, err = tx.changeOne(t.freshQ, args, t.entry(nullInt{Int64: int64(attempts), Valid: true}, nullString{Valid: true}))
		if err != nil {
			return fmt.Errorf("update: %w", err)
		}
		if n == 1 {
			return nil
		}
	}
	if t.d.readsBefore {
		var read struct {
			a      nullInt
			before nullString
		}
		err = tx.queryRow(t.readQ, args[t.readFrom:]...).Scan(&read.a, &read.before)
		a, before := read.a, read.before
		switch {
		case errors.Is(err, errNoRows):
			err = nil // not as expected: refused below
		case err == nil:
			n, err = tx.changeOne(t.q, args, t.entry(a, before))
		}
	} else {
		n, err = tx.change(t.returnQ, args, func(s scanner) (pending, error) {
			var a nullInt
			var before nullString
			err := s.Scan(&a, &before)
			return t.entry(a, before), err
		})
	}
	if err != nil {
		return fmt.Errorf("update: %w", err)
	}
	if n == 1 {
		return nil
	}
	guid := t.guid
	if tx.rerun() {
		// The first run's outcome is unknown: if the row is now
		// exactly what it wrote, it landed.
		var state, rspCode nullString
		var response []byte
		err := tx.queryRow(sqlOutcomeOf, guid).Scan(&state, &rspCode, &response)
		if err == nil && State(state.String) == o.State && rspCode.String == o.RspCode && bytes.Equal(response, o.Response) {
			return nil
		}
		// The row may have moved on since the first run landed (a
		// resend re-claimed it): the first run's history entry, in
		// this writer's chain, says whether it did. If so, this run
		// writes nothing more (no false conflict note).
		if err == nil && attempts > 0 && t.chain != "" {
			var n int64
			err = tx.queryRow(sqlLandedEntry, guid, t.chain, int64(attempts), string(t.from), string(o.State), o.RspCode, o.Why.Reason).Scan(&n)
			if err != nil {
				return fmt.Errorf("read history: %w", err)
			}
			if n > 0 {
				return nil
			}
		}
	}
	return stateError(tx, guid, t.from, attempts, "")
}

// stateError reads the row a failed conditional statement found, so the
// error says what happened: a missing row, or which state; for a
// transition of one claim's row (claimAttempts > 0), whether the row was
// re-claimed since (more attempts than the claim's). detail names the
// statement's further condition, kept only when the state alone does not
// explain the failure.
func stateError(tx stmts, guid string, want State, claimAttempts int, detail string) error {
	var s nullString
	var a nullInt
	err := tx.queryRow(sqlStateAttemptsOf, guid).Scan(&s, &a)
	switch {
	case errors.Is(err, errNoRows):
		return &StateError{GUID: guid, Want: want}
	case err != nil:
		return fmt.Errorf("read state: %w", err)
	}
	e := &StateError{GUID: guid, Want: want, Found: State(s.String), FoundAttempts: int(a.Int64)}
	if e.Found == "" {
		e.Found = "NULL"
	}
	switch {
	case claimAttempts > 0 && e.FoundAttempts > claimAttempts:
		e.Reclaimed = true
		e.Detail = fmt.Sprintf("re-claimed since: attempts %d, this claim's %d", e.FoundAttempts, claimAttempts)
	case e.Found == want:
		e.Detail = detail
	}
	return e
}

// Reclaim re-claims a FAILED row for a resend (the reprocess command):
// FAILED → SENT, attempts+1, in one conditional UPDATE. It returns the new
// attempts. If the row is not FAILED nothing changes and the error is a
// *StateError matching ErrStateChanged. A re-claim whose commit was not
// confirmed gives an *UnconfirmedClaimError, as Claim does: the caller
// does not send, and hands it to AbandonUnconfirmed.
func (l *Ledger) Reclaim(ctx context.Context, guid string) (attempts int, err error) {
	return l.reclaim(ctx, guid, 0, nil)
}

// ReclaimBelow is Reclaim that also requires attempts < maxAttempts in the
// same statement, so a row retried by the relay between a List and the
// re-claim is not sent once too often. A row at the limit gives a
// *StateError (Found: FAILED) matching ErrStateChanged.
func (l *Ledger) ReclaimBelow(ctx context.Context, guid string, maxAttempts int) (attempts int, err error) {
	if maxAttempts <= 0 {
		return 0, fmt.Errorf("ledger: reclaim %s: maxAttempts %d must be > 0", guid, maxAttempts)
	}
	return l.reclaim(ctx, guid, maxAttempts, nil)
}

// ReclaimSelected is ReclaimBelow that also requires the row to be as
// selected was read: the same rsp_code and attempts. A batch run's page
// is read before its rows are handled, and a row that the relay or
// another run re-claimed since (even one that came back to FAILED) is
// theirs: it gives a *StateError matching ErrStateChanged, with no read
// of its own before.
func (l *Ledger) ReclaimSelected(ctx context.Context, selected Row, maxAttempts int) (attempts int, err error) {
	if maxAttempts <= 0 {
		return 0, fmt.Errorf("ledger: reclaim %s: maxAttempts %d must be > 0", selected.GUID, maxAttempts)
	}
	return l.reclaim(ctx, selected.GUID, maxAttempts, &selected)
}

// reclaim re-claims guid: below maxAttempts when that is above 0, and
// only while the row is as selected when that is not nil.
func (l *Ledger) reclaim(ctx context.Context, guid string, maxAttempts int, selected *Row) (int, error) {
	var a int64
	token := l.newClaimToken()
	err := l.st.do(ctx, operation{guid: guid, run: opFunc(func(tx stmts) error {
		var (
			n   int64
			err error
		)
		below := reclaimed(guid, fmt.Sprintf("re-claimed to resend (attempts below %d)", maxAttempts), &a)
		limit := fmt.Sprintf("attempts limit %d reached", maxAttempts)
		switch {
		case selected != nil:
			n, err = tx.change(sqlReclaimSelected, []any{token, guid, maxAttempts, selected.RspCode, selected.Attempts}, below)
			limit = fmt.Sprintf("changed since it was selected (%s, attempts %d), or %s", selected.RspCode, selected.Attempts, limit)
		case maxAttempts > 0:
			n, err = tx.change(sqlReclaimBelow, []any{token, guid, maxAttempts}, below)
		default:
			n, err = tx.change(sqlReclaim, []any{token, guid}, reclaimed(guid, "re-claimed to resend", &a))
		}
		if err == nil && n == 0 && maxAttempts > 0 && plant.On(plant.ReprocessReclaimUnknown) {
			n, err = reclaimUnknownBelow(tx, token, guid, maxAttempts, &a)
		}
		if err == nil && n == 0 {
			return stateError(tx, guid, StateFailed, 0, limit)
		}
		return err
	})})
	if err != nil {
		l.countError(opReclaim, err)
		if errors.Is(err, ErrUnconfirmed) && a > 0 {
			// As for a claim: the row may be SENT with these attempts and
			// this token, and the caller must be able to abandon it.
			err = &UnconfirmedClaimError{GUID: guid, Attempts: int(a), Token: token, Err: err}
		}
		return 0, fmt.Errorf("ledger: reclaim %s: %w", guid, err)
	}
	return int(a), nil
}

// PurgeDone deletes the DONE rows last updated more than age ago, by the
// database's clock (SPEC 6a), and returns how many. Rows in any other state
// stay, however old. Each deleted row gets its history entry, saying reason
// ("purged after 30 days"); the history itself stays (PurgeHistory). With
// dryRun it only counts them. The delete runs in
// chunks of purgeChunk rows, one transaction each, so the relay's claims on
// the same ledger never wait long; on PostgreSQL each chunk takes rows no
// other purge holds (SKIP LOCKED), so purges on several hosts delete each
// row once. A cancelled ctx stops between chunks and the count so far is
// returned with the error.
func (l *Ledger) PurgeDone(ctx context.Context, age time.Duration, dryRun bool, reason string) (int64, error) {
	if age <= 0 {
		return 0, errors.New("ledger: purge: the age must be more than 0")
	}
	if reason == "" {
		return 0, errors.New("ledger: purge: no reason given for the history")
	}
	d := l.st.dialect()
	cond, cut := d.strictlyOlderThan(age)
	at := age.String() + " old"
	if dryRun {
		if l.isClosed.Load() {
			return 0, fmt.Errorf("ledger: purge (dry run): %w", ErrClosed)
		}
		var n int64
		q := `SELECT COUNT(*) FROM tx WHERE state = 'DONE' AND ` + cond
		if err := l.st.read().queryRow(ctx, q, cut).Scan(&n); err != nil {
			l.countError(opRead, err)
			return 0, fmt.Errorf("ledger: purge rows over %s (dry run): %w", at, err)
		}
		return n, nil
	}
	chunk := purgeChunkSQL(d, cond)
	var total int64
	for {
		var n int64
		err := l.st.do(ctx, operation{run: opFunc(func(tx stmts) error {
			var err error
			n, err = tx.change(chunk, []any{cut, purgeChunk}, func(s scanner) (pending, error) {
				var guid string
				var state, rsp nullString
				var attempts, key nullInt
				err := s.Scan(&guid, &state, &rsp, &attempts, &key)
				// The entry keeps the deleted row's key: it is how the
				// row's entries are found once the row is gone.
				return pending{guid: guid, stateBefore: State(state.String), rspBefore: rsp.String,
					attempts: int(attempts.Int64), why: Why{Reason: reason}, key: key.Int64}, err
			})
			return err
		})})
		if err != nil {
			l.countError(opPurge, err)
			return total, fmt.Errorf("ledger: purge rows over %s: %w", at, err)
		}
		total += n
		if n < purgeChunk {
			return total, nil
		}
	}
}

// claimSelectInsert is the planted mistake plant.ClaimSelectInsert: it reads
// the row and, seeing none, writes one that overwrites whatever another
// request inserted meanwhile. ok is false when it saw a row (the real claim
// then decides).
func (l *Ledger) claimSelectInsert(ctx context.Context, r Request) (Claim, bool) {
	if _, err := l.Get(ctx, r.GUID); !errors.Is(err, ErrNotFound) {
		return Claim{}, false
	}
	err := l.st.do(ctx, operation{guid: r.GUID, run: opFunc(func(tx stmts) error {
		// Through changeOne, as every write of tx must be (exec refuses
		// them): the planted claim writes its history entry too.
		_, err := tx.changeOne(`INSERT INTO tx(guid, tx_code, state, rsp_code, request, response, attempts, updated_at)
VALUES (?, ?, 'SENT', '', ?, NULL, 1, CURRENT_TIMESTAMP)
ON CONFLICT(guid) DO UPDATE SET state = 'SENT', updated_at = CURRENT_TIMESTAMP`, []any{r.GUID, r.TxCode, r.Frame},
			pending{guid: r.GUID, stateAfter: StateSent, attempts: 1, why: Why{Reason: reasonClaimed}})
		return err
	})})
	return Claim{Outcome: Owned, Attempts: 1}, err == nil
}

// reclaimUnknownBelow is the planted mistake plant.ReprocessReclaimUnknown:
// ReclaimBelow also takes an UNKNOWN row, UNKNOWN → SENT, attempts+1,
// whose request may have been posted. Its history entry says so (before:
// UNKNOWN), as every write of tx must.
func reclaimUnknownBelow(tx stmts, token, guid string, maxAttempts int, attempts *int64) (int64, error) {
	return tx.change(`UPDATE tx SET state = 'SENT', attempts = COALESCE(attempts, 0) + 1, updated_at = CURRENT_TIMESTAMP, claim_token = ?
WHERE guid = ? AND (state = 'UNKNOWN') IS TRUE AND COALESCE(attempts, 0) < ? RETURNING attempts, rsp_code`, []any{token, guid, maxAttempts},
		func(s scanner) (pending, error) {
			var rsp nullString
			if err := s.Scan(attempts, &rsp); err != nil {
				return pending{}, err
			}
			return pending{guid: guid, stateBefore: StateUnknown, rspBefore: rsp.String, stateAfter: StateSent, rspAfter: rsp.String,
				attempts: int(*attempts), why: Why{Reason: fmt.Sprintf("planted: an UNKNOWN row re-claimed to resend (attempts below %d)", maxAttempts)}}, nil
		})
}

// newClaimToken returns a value no other claim has, on any relay sharing
// the database: this Ledger's random prefix and a count.
//
// Tokens are made claimTokenBlock at a time, as slices of one string:
// every transfer claims, and a string each was an allocation each.
func (l *Ledger) newClaimToken() string {
	t := &l.tokens
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.next == len(t.ready) {
		b := t.buf[:0]
		ends := t.ends[:0]
		for range claimTokenBlock {
			b = strconv.AppendUint(append(b, l.tokenPrefix...), l.claims.Add(1), 36)
			ends = append(ends, len(b))
		}
		t.buf, t.ends = b, ends
		text := string(b)
		t.ready, t.next = t.ready[:0], 0
		from := 0
		for _, end := range ends {
			t.ready = append(t.ready, text[from:end])
			from = end
		}
	}
	token := t.ready[t.next]
	t.ready[t.next] = ""
	t.next++
	return token
}

// claimTokenBlock is how many claim tokens are made at once.
const claimTokenBlock = 64

// claimTokens are a Ledger's tokens made and not yet given
// (newClaimToken).
type claimTokens struct {
	mu    sync.Mutex
	ready []string // given up to next
	next  int
	buf   []byte
	ends  []int
}
