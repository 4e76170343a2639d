package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/testkit"
)

func guidsOf(rows []Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.GUID
	}
	return out
}

func TestList(t *testing.T) {
	eachStore(t, testList)
}

func testList(t *testing.T, l *Ledger) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)

	mk := func(state State, code string, age time.Duration) string {
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		seed(t, l, r, state, code)
		setUpdatedAt(t, l, r.GUID, now.Add(-age))
		return r.GUID
	}
	unknownOld := mk(StateUnknown, codeTimeout, time.Hour)
	unknownAtAge := mk(StateUnknown, codeTimeout, 10*time.Minute) // exactly min-age old
	unknownYoung := mk(StateUnknown, codeTimeout, 10*time.Minute-time.Second)
	failed1 := mk(StateFailed, codeNoConnect, 2*time.Hour)
	failed3 := mk(StateFailed, codeNoConnect, 3*time.Hour)
	raw(t, l).Exec(`UPDATE tx SET attempts = 3 WHERE guid = ?`, failed3)
	failedOther := mk(StateFailed, "E999", 4*time.Hour)
	sentStale := mk(StateSent, "", time.Hour)
	done := mk(StateDone, codeOK, 5*time.Hour)

	list := func(f Filter) []string {
		t.Helper()
		rows, err := l.List(ctx, f)
		assert.NilError(t, err)
		return guidsOf(rows)
	}

	// No filter: everything, oldest first; equal times by guid (the GUIDs
	// of this test increase in creation order).
	assert.DeepEqual(t, list(Filter{}), []string{done, failedOther, failed3, failed1, unknownOld, sentStale, unknownAtAge, unknownYoung})

	// resolve: UNKNOWN at least 10 minutes old; the row exactly 10 minutes
	// old is selected, the one a second younger is not.
	minAge := 10 * time.Minute
	before := now.Add(-minAge).Add(500 * time.Millisecond) // fraction dropped
	assert.DeepEqual(t, list(Filter{States: []State{StateUnknown}, UpdatedBefore: before}),
		[]string{unknownOld, unknownAtAge})
	assert.DeepEqual(t, list(Filter{States: []State{StateUnknown}, UpdatedBefore: now.Add(-minAge)}),
		[]string{unknownOld, unknownAtAge})

	// By the database's clock: every row here was stamped from the test's
	// clock, which is the database's on this host; the minute of margin
	// keeps a slow run from moving a row across the bound.
	assert.DeepEqual(t, list(Filter{States: []State{StateUnknown}, OlderThan: 30 * time.Minute}),
		[]string{unknownOld})
	assert.DeepEqual(t, list(Filter{States: []State{StateUnknown}, OlderThan: 9 * time.Minute}),
		[]string{unknownOld, unknownAtAge, unknownYoung})

	// Several states.
	assert.DeepEqual(t, list(Filter{States: []State{StateUnknown, StateSent}, UpdatedBefore: now.Add(-30 * time.Minute)}),
		[]string{unknownOld, sentStale})

	// reprocess: FAILED, E902, attempts < 3 (attempts == 3 excluded).
	assert.DeepEqual(t, list(Filter{States: []State{StateFailed}, RspCode: codeNoConnect, MaxAttempts: 3}),
		[]string{failed1})
	assert.DeepEqual(t, list(Filter{States: []State{StateFailed}, RspCode: codeNoConnect, MaxAttempts: 4}),
		[]string{failed3, failed1})
	assert.DeepEqual(t, list(Filter{States: []State{StateFailed}, RspCode: codeNoConnect, MaxAttempts: 1}),
		[]string{})

	// Limit keeps the oldest.
	assert.DeepEqual(t, list(Filter{States: []State{StateFailed}, Limit: 2}), []string{failedOther, failed3})

	_, err := l.List(ctx, Filter{States: []State{"BOGUS"}})
	assert.ErrorContains(t, err, "invalid state")

	// The row's fields come back whole.
	rows, err := l.List(ctx, Filter{States: []State{StateDone}})
	assert.NilError(t, err)
	assert.Equal(t, len(rows), 1)
	assert.Equal(t, rows[0].TxCode, txTransfer)
	assert.Equal(t, rows[0].RspCode, codeOK)
	assert.Equal(t, rows[0].Attempts, 1)
	assert.DeepEqual(t, rows[0].Response, responseFrame(done, codeOK))
	assert.Equal(t, rows[0].UpdatedAt, now.Add(-5*time.Hour))
}

func TestPurgeDone(t *testing.T) {
	eachStore(t, testPurgeDone)
}

func testPurgeDone(t *testing.T, l *Ledger) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	days := func(n int) time.Duration { return time.Duration(n) * 24 * time.Hour }

	var oldDone []string
	for range 3 {
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		seed(t, l, r, StateDone, codeOK)
		setUpdatedAt(t, l, r.GUID, now.Add(-days(40)))
		oldDone = append(oldDone, r.GUID)
	}
	keep := map[string]State{}
	add := func(state State, code string, age time.Duration) {
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		seed(t, l, r, state, code)
		setUpdatedAt(t, l, r.GUID, now.Add(-age))
		keep[r.GUID] = state
	}
	add(StateDone, codeOK, days(30)-time.Minute) // a minute short of 30 days: stays
	add(StateDone, codeRejected, days(29))       // young
	add(StateUnknown, codeTimeout, days(400))    // never purged
	add(StateFailed, codeNoConnect, days(400))   // never purged
	add(StateSent, "", days(400))                // never purged
	cut := days(30)

	n, err := l.PurgeDone(ctx, cut, true, "purged by the test")
	assert.NilError(t, err)
	assert.Equal(t, n, int64(3))
	st, err := l.Stats(ctx)
	assert.NilError(t, err)
	assert.Equal(t, st.Total, int64(8), "dry run deleted rows")

	n, err = l.PurgeDone(ctx, cut, false, "purged by the test")
	assert.NilError(t, err)
	assert.Equal(t, n, int64(3))
	for _, g := range oldDone {
		_, err := l.Get(ctx, g)
		assert.ErrorIs(t, err, ErrNotFound)
	}
	for g, s := range keep {
		row, err := l.Get(ctx, g)
		assert.NilError(t, err)
		assert.Equal(t, row.State, s)
	}

	n, err = l.PurgeDone(ctx, cut, false, "purged by the test")
	assert.NilError(t, err)
	assert.Equal(t, n, int64(0))
}

func TestPurgeDoneInChunks(t *testing.T) {
	eachStore(t, testPurgeDoneInChunks)
}

func testPurgeDoneInChunks(t *testing.T, l *Ledger) {
	ctx := context.Background()
	const rows = purgeChunk*2 + 17
	insertRows(t, l, rows, func(int) (State, bool) { return StateDone, true })
	before := l.Commits()
	n, err := l.PurgeDone(ctx, 24*time.Hour, false, "purged by the test") // the rows are older (insertRows)
	assert.NilError(t, err)
	assert.Equal(t, n, int64(rows))
	assert.Equal(t, l.Commits()-before, uint64(3))
}

func TestStats(t *testing.T) {
	eachStore(t, testStats)
}

func testStats(t *testing.T, l *Ledger) {
	ctx := context.Background()

	st, err := l.Stats(ctx)
	assert.NilError(t, err)
	assert.Equal(t, st.Total, int64(0))
	assert.Equal(t, len(st.ByState), len(States))
	assert.Check(t, st.OldestUnknown.IsZero())

	now := time.Now().UTC().Truncate(time.Second)
	add := func(state State, code string, age time.Duration) {
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		seed(t, l, r, state, code)
		setUpdatedAt(t, l, r.GUID, now.Add(-age))
	}
	add(StateDone, codeOK, 0)
	add(StateDone, codeOK, 0)
	add(StateDone, codeRejected, 0)
	add(StateUnknown, codeTimeout, time.Hour)
	add(StateUnknown, codeTimeout, 2*time.Hour)
	add(StateFailed, codeNoConnect, 0)
	add(StateSent, "", 3*time.Minute)

	st, err = l.Stats(ctx)
	assert.NilError(t, err)
	assert.Equal(t, st.Total, int64(7))
	assert.DeepEqual(t, st.ByState, map[State]int64{
		StateReceived: 0, StateSent: 1, StateDone: 3, StateUnknown: 2, StateFailed: 1,
	})
	assert.DeepEqual(t, st.ByCode, []CodeCount{
		{StateDone, codeOK, 2},
		{StateDone, codeRejected, 1},
		{StateFailed, codeNoConnect, 1},
		{StateSent, "", 1},
		{StateUnknown, codeTimeout, 2},
	})
	assert.Equal(t, st.OldestUnknown, now.Add(-2*time.Hour))
	assert.Equal(t, st.OldestSent, now.Add(-3*time.Minute))
}

// TestScanPages: Scan reads page after page (three rows a page here) and
// yields every selected row once, in order, even when many rows share one
// updated_at second or have none; Limit, Count and a stopping fn hold; and
// no read snapshot is open while fn runs (a checkpoint can truncate the
// WAL).
func TestScanPages(t *testing.T) {
	defer func(n int) { scanPageSize = n }(scanPageSize)
	scanPageSize = 3
	eachStore(t, testScanPages)
}

func testScanPages(t *testing.T, l *Ledger) {
	ctx := context.Background()
	// 10 DONE rows in one second, 2 with NULL updated_at, 5 UNKNOWN.
	insertRows(t, l, 17, func(i int) (State, bool) {
		if i <= 12 {
			return StateDone, i != 4 && i != 9
		}
		return StateUnknown, true
	})
	g := func(i int) string { return fmt.Sprintf("%032x", i) }
	done := Filter{States: []State{StateDone}}

	var got []string
	assert.NilError(t, l.Scan(ctx, done, func(r Row) error {
		if l.Store() == "sqlite" {
			var busy, logFrames, checkpointed int
			assert.NilError(t, rawDB(t, l.Path()).QueryRow(`PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logFrames, &checkpointed))
			assert.Equal(t, busy, 0, "a read snapshot is open during fn")
		}
		got = append(got, r.GUID)
		return nil
	}))
	assert.DeepEqual(t, got, []string{g(4), g(9), g(1), g(2), g(3), g(5), g(6), g(7), g(8), g(10), g(11), g(12)})
	n, err := l.Count(ctx, done)
	assert.NilError(t, err)
	assert.Equal(t, n, 12)

	rows, err := l.List(ctx, Filter{States: []State{StateDone}, Limit: 7})
	assert.NilError(t, err)
	assert.DeepEqual(t, guidsOf(rows), got[:7])

	stop := errors.New("stop")
	calls := 0
	err = l.Scan(ctx, done, func(Row) error {
		calls++
		if calls == 4 {
			return stop
		}
		return nil
	})
	assert.Equal(t, err, stop)
	assert.Equal(t, calls, 4)

	// A row that leaves the selection before its page is read is not
	// yielded.
	got = got[:0]
	assert.NilError(t, l.Scan(ctx, done, func(r Row) error {
		if r.GUID == g(1) {
			assert.NilError(t, l.Transition(ctx, g(11), StateDone, Outcome{Why: Why{Reason: "test"}, State: StateFailed, RspCode: codeNoConnect}))
		}
		got = append(got, r.GUID)
		return nil
	}))
	assert.DeepEqual(t, got, []string{g(4), g(9), g(1), g(2), g(3), g(5), g(6), g(7), g(8), g(10), g(12)})
}

// TestScanUsesTheIndex: with one state in the filter, as every batch
// command has, each of Scan's page queries is a range of the (state,
// updated_at) index, and the dated rows' pages never sort the whole
// selection (which would make a scan of n rows cost n²/page); SQLite may
// still sort rows that share one updated_at by guid ("LAST TERM OF ORDER
// BY"). The NULL phase sorts its rows by guid: only rows without an
// updated_at, which this code never writes.
func TestScanUsesTheIndex(t *testing.T) {
	l := newLedger(t)
	db := rawDB(t, l.Path())
	for _, f := range []Filter{
		{States: []State{StateDone}, UpdatedBefore: time.Now()},
		{States: []State{StateUnknown}, UpdatedBefore: time.Now()},
		{States: []State{StateFailed}, RspCode: codeNoConnect, MaxAttempts: 5},
	} {
		where, args, err := f.clauses(sqliteDialect)
		assert.NilError(t, err)
		for _, ph := range scanPhases {
			for _, withCursor := range []bool{false, true} {
				a := args
				if withCursor {
					a = append(a, ph.cursor(sqliteDialect, Row{GUID: testkit.GUID(), UpdatedAt: time.Now()})...)
				}
				q := ph.query(where, withCursor)
				p := strings.Join(queryPlan(t, db, q, append(a, 256)...), "; ")
				assert.Assert(t, strings.Contains(p, "USING INDEX tx_state_updated_at"), "%s\nplan: %s", q, p)
				if ph.cond == "updated_at IS NOT NULL" {
					assert.Assert(t, !strings.Contains(p, "TEMP B-TREE FOR ORDER BY"), "%s\nplan: %s", q, p)
				}
			}
		}
	}
}

// insertRows inserts rows guid %032x of 1…n straight into the table, each
// in the state of(i) returns, updated 2026-11-29 10:00:00 UTC or (dated
// false) with a NULL updated_at.
func insertRows(t *testing.T, l *Ledger, n int, of func(i int) (State, bool)) {
	t.Helper()
	db := raw(t, l)
	at := db.Time(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	var values []string
	var args []any
	for i := 1; i <= n; i++ {
		state, dated := of(i)
		var updated any
		if dated {
			updated = at
		}
		values = append(values, "(?, 'BKTR0001', ?, '0000', ?, ?, 1, ?)")
		args = append(args, fmt.Sprintf("%032x", i), string(state), []byte{0}, []byte{0}, updated)
	}
	db.Exec(`INSERT INTO tx(guid, tx_code, state, rsp_code, request, response, attempts, updated_at) VALUES `+
		strings.Join(values, ", "), args...)
}

// TestScanByFirstClaim: with ByFirstClaim, Scan yields the rows oldest
// first by the time each was first claimed, whatever their updated_at
// says, and the rows without one (no hist_key) before them, by guid.
func TestScanByFirstClaim(t *testing.T) {
	l := newLedger(t)
	db := raw(t, l)
	insertRows(t, l, 6, func(int) (State, bool) { return StateFailed, true })
	// Claimed in the order 4, 2, 6, 1 (keys), 3 and 5 with none; updated
	// in the opposite order.
	for guid, key := range map[int]int64{4: 100, 2: 200, 6: 300, 1: 400} {
		db.Exec(`UPDATE tx SET hist_key = ?, updated_at = ? WHERE guid = ?`, key,
			db.Time(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).Add(-time.Duration(key)*time.Second)), fmt.Sprintf("%032x", guid))
	}
	old := scanPageSize
	scanPageSize = 2
	t.Cleanup(func() { scanPageSize = old })
	var got []string
	assert.NilError(t, l.Scan(context.Background(), Filter{States: []State{StateFailed}, ByFirstClaim: true}, func(r Row) error {
		got = append(got, r.GUID[28:])
		return nil
	}))
	assert.DeepEqual(t, got, []string{"0003", "0005", "0004", "0002", "0006", "0001"})
}

// TestScanByFirstClaimUsesTheIndex: resolve's and reprocess's first-claim
// pages are ranges of the state's partial first-claim index, never a sort
// of the whole selection.
func TestScanByFirstClaimUsesTheIndex(t *testing.T) {
	l := newLedger(t)
	db := rawDB(t, l.Path())
	for _, c := range []struct {
		f     Filter
		index string
	}{
		{Filter{States: []State{StateUnknown}, OlderThan: time.Minute, ByFirstClaim: true}, "tx_unknown_first_claim"},
		{Filter{States: []State{StateFailed}, RspCode: codeNoConnect, MaxAttempts: 5, ByFirstClaim: true}, "tx_failed_first_claim"},
	} {
		where, args, err := c.f.clauses(sqliteDialect)
		assert.NilError(t, err)
		for _, ph := range firstClaimPhases {
			for _, withCursor := range []bool{false, true} {
				a := args
				if withCursor {
					a = append(a, ph.cursor(sqliteDialect, Row{GUID: testkit.GUID(), FirstClaim: 12345})...)
				}
				q := ph.query(where, withCursor)
				p := strings.Join(queryPlan(t, db, q, append(a, 256)...), "; ")
				assert.Assert(t, strings.Contains(p, "INDEX "+c.index), "%s\nplan: %s", q, p)
				assert.Assert(t, !strings.Contains(p, "TEMP B-TREE"), "%s\nplan: %s", q, p)
			}
		}
	}
}

// TestOlderThanNeverEarly: a row is selected by its age (resolve's
// --min-age and --stale-sent, the relay's settling) only once it is at
// least that old by the database's clock, whatever instant of a second it
// was changed at: SQLite's updated_at keeps whole seconds, so its age is
// rounded up, never down. A claim late in a second, selected for an age
// of 100 ms, must wait for the second after it.
func TestOlderThanNeverEarly(t *testing.T) {
	eachStore(t, func(t *testing.T, l *Ledger) {
		ctx := context.Background()
		const age = 100 * time.Millisecond
		for _, phase := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 850 * time.Millisecond} {
			// The claim at phase into a second (choosing an instant,
			// not waiting on anything).
			now := time.Now()
			at := now.Truncate(time.Second).Add(phase)
			if !at.After(now) {
				at = at.Add(time.Second)
			}
			time.Sleep(time.Until(at))
			r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
			claimed := time.Now()
			seed(t, l, r, StateSent, "")
			f := Filter{States: []State{StateSent}, OlderThan: age, GUIDs: []string{r.GUID}}
			tick := time.NewTicker(5 * time.Millisecond)
			deadline := time.After(5 * time.Second)
			for selected := false; !selected; {
				rows, err := l.List(ctx, f)
				assert.NilError(t, err)
				// The row's age at the List is at most this.
				oldest := time.Since(claimed)
				if selected = len(rows) == 1; selected {
					assert.Assert(t, oldest >= age, "claimed %v into a second, selected for an age of %v when at most %v old", phase, age, oldest)
				}
				select {
				case <-tick.C:
				case <-deadline:
					t.Fatalf("claimed %v into a second: not selected for an age of %v within 5 s", phase, age)
				}
			}
			tick.Stop()
		}
	})
}
