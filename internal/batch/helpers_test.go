package batch

import (
	"context"
	"strconv"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testLedger is a fresh ledger with helpers to put rows into any state and
// age.
type testLedger struct {
	t    *testing.T
	path string
	l    *ledger.Ledger
	raw  *testkit.Raw
}

// eachStore runs fn as a subtest on a fresh ledger of each store.
func eachStore(t *testing.T, fn func(t *testing.T, tl *testLedger)) {
	testkit.EachStore(t, func(t *testing.T, db string) { fn(t, newTestLedger(t, db)) })
}

func newTestLedger(t *testing.T, db string) *testLedger {
	l, err := ledger.Open(db)
	assert.NilError(t, err)
	t.Cleanup(func() { l.Close() })
	return &testLedger{t: t, path: db, l: l, raw: testkit.OpenRaw(t, db, ledger.IsURL(db))}
}

// transferFrame builds a request frame of testkit.TransferTx for guid,
// from the rich account to another of the bank, and its header.
func transferFrame(t *testing.T, guid, memo string, amount int64) (generated.Header, []byte) {
	frame := testkit.Transfer(t, guid, map[string]string{"wdAcct": "11002003004005", "dpAcct": "11002003004007", "amount": strconv.FormatInt(amount, 10), "memo": memo})
	return headerOf(t, frame), frame
}

// headerOf decodes frame's header.
func headerOf(t *testing.T, frame []byte) generated.Header {
	var h generated.Header
	assert.NilError(t, h.Decode(string(frame[:generated.HeaderLen])))
	return h
}

// seed claims a new transfer and leaves it in state with code, updated age ago.
func (tl *testLedger) seed(state ledger.State, code generated.RspCode, age time.Duration) string {
	guid := testkit.GUID()
	h, frame := transferFrame(tl.t, guid, "seed", 1000)
	tl.seedFrame(h, frame, state, code, age)
	return guid
}

// seedFrame claims the request frame with header h and leaves its row in
// state with code, updated age ago.
func (tl *testLedger) seedFrame(h generated.Header, frame []byte, state ledger.State, code generated.RspCode, age time.Duration) {
	t := tl.t
	guid := h.GUID
	ctx := context.Background()
	c, err := tl.l.Claim(ctx, ledger.Request{GUID: guid, TxCode: h.TxCode, Frame: frame, Body: frame[generated.HeaderLen:]})
	assert.NilError(t, err)
	assert.Equal(t, c.Outcome, ledger.Owned)
	if state != ledger.StateSent {
		var body generated.ResponseBody
		if code == generated.RspHTTP200 {
			body = &generated.BKTR0001Response{CoreTxid: "T1", Balance: 1, PostedAt: "20261129103000"}
		}
		rsp, err := wire.AppendResponse(nil, &h, code, body, time.Now())
		assert.NilError(t, err)
		assert.NilError(t, tl.l.Finish(ctx, guid, 1, ledger.Outcome{Why: ledger.Why{Reason: "test"}, State: state, RspCode: string(code), Response: rsp}))
	}
	tl.age(guid, age)
}

// age sets a row's updated_at to age ago.
func (tl *testLedger) age(guid string, age time.Duration) {
	tl.raw.SetUpdatedAt(guid, time.Now().Add(-age))
}

func (tl *testLedger) setAttempts(guid string, n int) {
	tl.raw.Exec(`UPDATE tx SET attempts = ? WHERE guid = ?`, n, guid)
}

func (tl *testLedger) row(guid string) ledger.Row {
	r, err := tl.l.Get(context.Background(), guid)
	assert.NilError(tl.t, err)
	return r
}

func (tl *testLedger) exists(guid string) bool {
	_, err := tl.l.Get(context.Background(), guid)
	return err == nil
}
