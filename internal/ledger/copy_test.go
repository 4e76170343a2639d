package ledger

import (
	"context"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/testkit"
)

// TestCopy: every row of a SQLite file reaches the target as it is; a
// second run copies nothing and changes nothing; a GUID the target holds
// with other content is reported, never overwritten.
func TestCopy(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, target string) {
		defer func(n int) { scanPageSize = n }(scanPageSize)
		scanPageSize = 7 // several pages per state
		ctx := context.Background()
		from := newLedger(t)
		var guids []string
		for i := range 450 { // more than two copy pages
			r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
			state := States[1+i%4] // SENT, DONE, UNKNOWN, FAILED
			seed(t, from, r, state, map[State]string{StateDone: codeOK, StateUnknown: codeTimeout, StateFailed: codeNoConnect}[state])
			guids = append(guids, r.GUID)
		}
		setUpdatedAt(t, from, guids[0], time.Now().Add(-400*24*time.Hour))

		to := openLedger(t, target)
		c, err := Copy(ctx, from, to)
		assert.NilError(t, err)
		var entries int64
		assert.NilError(t, from.st.read().queryRow(ctx, `SELECT COUNT(*) FROM history`).Scan(&entries))
		assert.DeepEqual(t, c, CopyCounts{Read: 450, Copied: 450, History: entries})
		// The copied chains verify in the target, and each copied row has
		// its entry saying so, after its own.
		_, err = to.Audit(ctx)
		assert.NilError(t, err)
		h, err := to.History(ctx, guids[1])
		assert.NilError(t, err)
		fromH, err := from.History(ctx, guids[1])
		assert.NilError(t, err)
		assert.Equal(t, len(h), len(fromH)+1)
		assert.DeepEqual(t, h[:len(fromH)], fromH)
		last := h[len(h)-1]
		assert.Equal(t, last.Reason, "copied from "+from.Path())
		assert.Equal(t, last.Chain, to.ChainHead().Chain)
		assert.Equal(t, last.StateAfter, fromH[len(fromH)-1].StateAfter)
		for _, g := range guids {
			a, err := from.Get(ctx, g)
			assert.NilError(t, err)
			b, err := to.Get(ctx, g)
			assert.NilError(t, err)
			assert.Assert(t, sameRow(a, b), "%s: %+v\n%+v", g, a, b)
		}
		st, err := to.Stats(ctx)
		assert.NilError(t, err)
		assert.Equal(t, st.Total, int64(450))

		c, err = Copy(ctx, from, to)
		assert.NilError(t, err)
		assert.DeepEqual(t, c, CopyCounts{Read: 450, Present: 450}) // no history copied twice

		// The target moved on for one GUID: it stays as the target has it.
		changed := guids[1] // DONE
		raw(t, to).Exec(`UPDATE tx SET rsp_code = 'B201' WHERE guid = ?`, changed)
		c, err = Copy(ctx, from, to)
		assert.NilError(t, err)
		assert.DeepEqual(t, c, CopyCounts{Read: 450, Present: 449, Conflicts: []string{changed}})
		row, err := to.Get(ctx, changed)
		assert.NilError(t, err)
		assert.Equal(t, row.RspCode, "B201")
	})
}
