package batch

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

// lastEntry is guid's newest history entry, after checking that the change
// before it left the row where this one starts.
func lastEntry(t *testing.T, l *ledger.Ledger, guid string) ledger.Entry {
	t.Helper()
	es, err := l.History(context.Background(), guid)
	assert.NilError(t, err)
	assert.Assert(t, len(es) >= 2, "%s: %d entries", guid, len(es))
	e, prev := es[len(es)-1], es[len(es)-2]
	assert.Check(t, e.StateBefore == prev.StateAfter && e.RspBefore == prev.RspAfter, "%+v does not follow %+v", e, prev)
	return e
}

// TestEachBatchCommandWritesHistory: resolve (a lookup's 200 and 404, a
// stale SENT row), reprocess (its re-claim and the outcome) and purge (the
// deleted row, then the history it purges) each write one entry per
// change, naming the run and why.
func TestEachBatchCommandWritesHistory(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		ctx := context.Background()
		c := newCore(t)
		posted := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, 2*time.Minute)
		neverPosted := tl.seed(ledger.StateUnknown, generated.RspReadTimeout, 2*time.Minute)
		staleSent := tl.seed(ledger.StateSent, "", 11*time.Minute)
		resend := tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
		c.post(t, tl, posted)

		resolver := tl.open(t, "resolve")
		_, err := Resolve(ctx, resolver, c.client(t), ResolveConfig{MinAge: time.Minute, StaleSent: 10 * time.Minute, Now: time.Now()})
		assert.NilError(t, err)
		for _, tc := range []struct {
			guid                string
			before, after       ledger.State
			rspBefore, rspAfter generated.RspCode
			reason              string
			status              int
		}{
			{posted, ledger.StateUnknown, ledger.StateDone, generated.RspReadTimeout, generated.RspHTTP200, "lookup 200: posted", 200},
			{neverPosted, ledger.StateUnknown, ledger.StateFailed, generated.RspReadTimeout, generated.RspConnectFail, "lookup 404: never posted", 404},
			{staleSent, ledger.StateSent, ledger.StateFailed, "", generated.RspConnectFail, "stale SENT, lookup 404: never posted", 404},
		} {
			e := lastEntry(t, tl.l, tc.guid)
			assert.Check(t, is.Equal(e.StateBefore, tc.before))
			assert.Check(t, is.Equal(e.StateAfter, tc.after))
			assert.Check(t, is.Equal(e.RspBefore, string(tc.rspBefore)))
			assert.Check(t, is.Equal(e.RspAfter, string(tc.rspAfter)))
			assert.Check(t, is.Equal(e.Reason, tc.reason))
			assert.Check(t, is.Equal(e.HTTPStatus, tc.status))
			assert.Check(t, e.Took > 0)
			assert.Check(t, is.Equal(e.Command, "resolve"))
			assert.Check(t, is.Equal(e.Chain, resolver.ChainHead().Chain))
		}

		reprocessor := tl.open(t, "reprocess")
		_, err = Reprocess(ctx, reprocessor, c.client(t), ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
		assert.NilError(t, err)
		es, err := tl.l.History(ctx, resend)
		assert.NilError(t, err)
		assert.Equal(t, len(es), 4) // claim, E902, re-claim, 0000
		reclaim, done := es[2], es[3]
		assert.Check(t, is.Equal(reclaim.Reason, "re-claimed to resend (attempts below 3)"))
		assert.Check(t, reclaim.StateBefore == ledger.StateFailed && reclaim.StateAfter == ledger.StateSent && reclaim.Attempts == 2)
		assert.Check(t, is.Equal(done.Reason, "core answered HTTP 200"))
		assert.Check(t, done.StateAfter == ledger.StateDone && done.HTTPStatus == 200 && done.Took > 0)
		assert.Check(t, reclaim.Command == "reprocess" && done.Command == "reprocess")

		// purge: each deleted row's entry; its history stays.
		tl.age(posted, 40*24*time.Hour)
		purger := tl.open(t, "purge")
		s, err := Purge(ctx, purger, PurgeConfig{Days: 30, HistoryDays: 400})
		assert.NilError(t, err)
		assert.Equal(t, s.String(), "purge: deleted=1 history_deleted=0")
		e := lastEntry(t, tl.l, posted)
		assert.Check(t, e.StateBefore == ledger.StateDone && e.StateAfter == "" && e.RspBefore == string(generated.RspHTTP200))
		assert.Check(t, is.Equal(e.Reason, "purged after 30 days"))
		assert.Check(t, is.Equal(e.Command, "purge"))

		// --history-days: every entry written so far, made two days old
		// (ages are the database's: its clock cannot be moved; the hashes
		// of what is removed no longer matter), is removed, and the history
		// says so.
		var entries int64
		assert.NilError(t, tl.raw.QueryRow(`SELECT COUNT(*) FROM history`, nil, &entries))
		old := time.Now().Add(-48 * time.Hour).UTC()
		if tl.raw.Postgres() {
			tl.raw.Exec(`UPDATE history SET at = ?`, old)
		} else {
			tl.raw.Exec(`UPDATE history SET at = ?`, old.Format("2006-01-02 15:04:05.000000"))
		}
		s, err = Purge(ctx, purger, PurgeConfig{Days: 30, HistoryDays: 1})
		assert.NilError(t, err)
		assert.Equal(t, s.String(), fmt.Sprintf("purge: deleted=0 history_deleted=%d", entries))
		notes, err := tl.l.History(ctx, "")
		assert.NilError(t, err)
		assert.Assert(t, len(notes) >= 1)
		for _, n := range notes {
			assert.Check(t, is.Contains(n.Reason, "history purged after 1 days: history of chain "))
			assert.Check(t, is.Equal(n.Command, "purge"))
		}
		_, err = tl.l.Audit(ctx)
		assert.NilError(t, err)
	})
}

// open opens the test's ledger once more, as the batch command name would.
func (tl *testLedger) open(t *testing.T, name string) *ledger.Ledger {
	l, err := ledger.OpenExisting(tl.path, ledger.WithActor(ledger.NewActor(name)))
	assert.NilError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}
