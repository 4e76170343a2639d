package batch

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

const day = 24 * time.Hour

func TestPurgeDeletesOnlyOldDoneRows(t *testing.T) {
	eachStore(t, testPurgeDeletesOnlyOldDoneRows)
}

func testPurgeDeletesOnlyOldDoneRows(t *testing.T, tl *testLedger) {
	oldDone := tl.seed(ledger.StateDone, generated.RspHTTP200, 31*day)
	oldRejected := tl.seed(ledger.StateDone, generated.RspInsufficientFunds, 40*day)
	youngDone := tl.seed(ledger.StateDone, generated.RspHTTP200, 29*day)
	// Unsettled rows stay however old they are.
	keep := []string{
		tl.seed(ledger.StateUnknown, generated.RspReadTimeout, 400*day),
		tl.seed(ledger.StateFailed, generated.RspConnectFail, 400*day),
		tl.seed(ledger.StateSent, "", 400*day),
	}
	tl.raw.Exec(`INSERT INTO tx(guid, tx_code, state, rsp_code, request, response, attempts, updated_at)
		VALUES ('ffffffffffffffffffffffffffffffff', 'BKTR0001', 'RECEIVED', '', ?, NULL, 1, ?)`, []byte{0}, tl.raw.Time(time.Now().Add(-400*day)))
	keep = append(keep, "ffffffffffffffffffffffffffffffff", youngDone)

	var out bytes.Buffer
	s, err := Purge(context.Background(), tl.l, PurgeConfig{Days: 30, DryRun: true, Out: &out})
	assert.NilError(t, err)
	assert.Equal(t, s.String(), "purge (dry run): deleted=2")
	assert.Assert(t, is.Contains(out.String(), "would delete "+oldDone))
	assert.Assert(t, is.Contains(out.String(), "would delete "+oldRejected))
	assert.Equal(t, strings.Count(out.String(), "would delete"), 2)
	assert.Assert(t, tl.exists(oldDone), "a dry run changes nothing")

	s, err = Purge(context.Background(), tl.l, PurgeConfig{Days: 30})
	assert.NilError(t, err)
	assert.Equal(t, s.String(), "purge: deleted=2")
	assert.Assert(t, !tl.exists(oldDone))
	assert.Assert(t, !tl.exists(oldRejected))
	for _, g := range keep {
		assert.Assert(t, tl.exists(g), g)
	}
}

// TestPurgeRefusesDaysBelowOne: --days 0 would delete every DONE row, and
// the same frame sent again would be posted again (SPEC 7).
func TestPurgeRefusesDaysBelowOne(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		done := tl.seed(ledger.StateDone, generated.RspHTTP200, 400*day)
		for _, dry := range []bool{false, true} {
			_, err := Purge(context.Background(), tl.l, PurgeConfig{Days: 0, DryRun: dry, Out: io.Discard})
			assert.ErrorContains(t, err, "at least 1")
			assert.ErrorIs(t, err, ErrWindowTooShort)
		}
		assert.Assert(t, tl.exists(done), "nothing deleted")
	})
}
