package outcome_test

import (
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
