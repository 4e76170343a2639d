package outcome_test

import (
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/outcome"
)

const guid = "0123456789abcdef0123456789abcdef"

func TestOfCall(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC)
	req := generated.Header{TxCode: "BKTR0001", GUID: guid, Flag: generated.FlagRequest, SrcOrg: "081", DstOrg: "999", SentAt: "20261129100000"}
	good := &generated.BKTR0001Response{CoreTxid: "T1", Balance: 5, PostedAt: "20261129103000"}
	bad := &generated.BKTR0001Response{CoreTxid: "T0000000000000001X", Balance: 5, PostedAt: "20261129103000"}
	for _, tc := range []struct {
		name    string
		req     generated.Header
		res     corecall.Result
		want    generated.Source
		wantLen int
	}{
		{"success", req, corecall.Result{Source: generated.SourceHTTP200, Body: good}, generated.SourceHTTP200, generated.HeaderLen + generated.BKTR0001ResponseLen},
		{"success that cannot be framed", req, corecall.Result{Source: generated.SourceHTTP200, Body: bad}, generated.SourceReadTimeout, generated.HeaderLen},
		{"success without a body", req, corecall.Result{Source: generated.SourceHTTP200}, generated.SourceReadTimeout, generated.HeaderLen},
		{"refusal", req, corecall.Result{Source: generated.SourceLimitExceeded}, generated.SourceLimitExceeded, generated.HeaderLen},
		{"header that does not encode", generated.Header{TxCode: "BKTR0001", GUID: "nothex", SrcOrg: "081", DstOrg: "999"}, corecall.Result{Source: generated.SourceConnectFail}, generated.SourceConnectFail, generated.HeaderLen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, src := outcome.OfCall([]byte("x"), &tc.req, tc.res, now)
			out := rec.Response
			assert.Equal(t, rec.RspCode, string(tc.want.Code()))
			assert.Equal(t, rec.State, ledger.State(tc.want.LedgerState()))
			assert.Equal(t, src, tc.want)
			assert.Equal(t, string(out[:1]), "x", "appends")
			out = out[1:]
			assert.Equal(t, len(out), tc.wantLen)
			h := generated.RawHeader(out)
			assert.Equal(t, h.RspCode, string(tc.want.Code()))
			assert.Equal(t, h.Flag, generated.FlagResponse)
			assert.Equal(t, h.SrcOrg, "999")
			assert.Equal(t, h.SentAt, "20261129103000")
		})
	}
}

// TestAnswerBeforeRecord: an answer may go out before its row is recorded
// only where settling the row by its transaction's own rule reaches the
// same answer.
func TestAnswerBeforeRecord(t *testing.T) {
	recorded := []generated.Source{
		generated.SourceHTTP200, generated.SourceInsufficientFunds, generated.SourceNoAccount,
		generated.SourceLimitExceeded, generated.SourceHTTP500, generated.SourceReadTimeout, generated.SourceConnectFail,
	}
	for _, tx := range generated.Transactions() {
		for _, src := range recorded {
			var want bool
			switch {
			case src == generated.SourceReadTimeout || src == generated.SourceConnectFail:
				want = true // inquiry or "never posted": what settling reaches anyway
			case src == generated.SourceHTTP200:
				want = tx.Settle == generated.SettleByLookup // only a lookup finds the posting again
			}
			assert.Equal(t, outcome.AnswerBeforeRecord(tx, src), want, "%s %s", tx.Code, src)
		}
	}
}

func TestOfLookupAndNotPosted(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC)
	req := generated.Header{TxCode: "BKTR0001", GUID: guid, Flag: generated.FlagRequest, SrcOrg: "081", DstOrg: "999", SentAt: "20261129100000"}
	body := &generated.BKTR0001Response{CoreTxid: "T1", Balance: 5, PostedAt: "20261129103000"}

	rec, ok := outcome.OfLookup(&req, corecall.Lookup{Posted: true, Body: body}, now)
	assert.Assert(t, ok)
	assert.Equal(t, rec.State, ledger.StateDone)
	assert.Equal(t, rec.RspCode, string(generated.RspHTTP200))
	assert.Equal(t, len(rec.Response), generated.HeaderLen+generated.BKTR0001ResponseLen)

	rec, ok = outcome.OfLookup(&req, corecall.Lookup{}, now)
	assert.Assert(t, ok)
	assert.Equal(t, rec.State, ledger.StateFailed)
	assert.Equal(t, rec.RspCode, string(generated.RspConnectFail))
	assert.Equal(t, len(rec.Response), generated.HeaderLen)

	// A posted answer that cannot be framed (another transaction's body)
	// settles nothing.
	_, ok = outcome.OfLookup(&req, corecall.Lookup{Posted: true, Body: &generated.BKIQ0001Response{Balance: 1, AsOf: "20261129103000"}}, now)
	assert.Assert(t, !ok)

	rec = outcome.NotPosted(&req, now)
	assert.Equal(t, rec.State, ledger.StateFailed)
	assert.Equal(t, rec.RspCode, string(generated.RspConnectFail))
}

// TestAnswerAndRejection: an answer without a call result carries the
// decoded header's identity (falling back field by field when that header
// will not encode), and a rejection the raw bytes at the header positions,
// whatever the frame holds.
func TestAnswerAndRejection(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC)
	req := generated.Header{TxCode: "BKTR0001", GUID: guid, Flag: generated.FlagRequest, SrcOrg: "081", DstOrg: "999", SentAt: "20261129100000"}
	for _, tc := range []struct {
		name string
		req  generated.Header
	}{
		{"decoded header", req},
		{"header that does not encode", generated.Header{TxCode: "BKTR0001", GUID: "nothex", SrcOrg: "081", DstOrg: "999"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := outcome.Answer([]byte("x"), &tc.req, generated.SourceInProgress, ledger.Why{Reason: "test"}, now)
			assert.Equal(t, rec.RspCode, string(generated.RspInProgress))
			assert.Equal(t, rec.State, ledger.State(generated.SourceInProgress.LedgerState()))
			assert.Equal(t, rec.Why.Reason, "test")
			assert.Equal(t, string(rec.Response[:1]), "x", "appends")
			h := generated.RawHeader(rec.Response[1:])
			assert.Equal(t, len(rec.Response[1:]), generated.HeaderLen)
			assert.Equal(t, h.RspCode, string(generated.RspInProgress))
			assert.Equal(t, strings.TrimRight(h.GUID, " "), tc.req.GUID)
			assert.Equal(t, h.SrcOrg, "999")
			assert.Equal(t, h.DstOrg, "081")
			assert.Equal(t, h.SentAt, "20261129103000")
		})
	}

	frame := []byte("0150BKTR0001" + guid + "S081999")
	out := outcome.Rejection([]byte("x"), frame, generated.SourceBadFrame, now)
	assert.Equal(t, string(out[:1]), "x", "appends")
	h := generated.RawHeader(out[1:])
	assert.Equal(t, h.RspCode, string(generated.RspBadFrame))
	assert.Equal(t, h.GUID, guid)
	assert.Equal(t, h.TxCode, "BKTR0001")
	assert.Equal(t, h.SrcOrg, "999")
	assert.Equal(t, h.DstOrg, "081")
}
