package generated_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/fixedwidth"
	"lhrelay/internal/generated"
)

// The frames below are written out by hand from SPEC §1–§2, so the tests
// check the generated code against the contract, not against itself.
const (
	guid       = "0123456789abcdef0123456789abcdef"
	reqHeader  = "0143" + "BKTR0001" + guid + "S" + "081" + "999" + "    " + "20261129103000" + "           "
	bktrBody   = "081" + "11002003004005" + "004" + "00012345678901" + "0000000050000" + "rent                "
	bktrFrame  = reqHeader + bktrBody
	bktrAnswer = "T000000000000001" + "000000000950000" + "20261129103001"
	bkiqBody   = "081" + "11002003004005"
	bkiqAnswer = "000000001000000" + "20261129103000"
)

func TestHeaderRoundTrip(t *testing.T) {
	assert.Equal(t, len(reqHeader), generated.HeaderLen)
	assert.Equal(t, len(bktrFrame), generated.PrefixLen+143)

	var h generated.Header
	assert.NilError(t, h.Decode(reqHeader))
	assert.DeepEqual(t, h, generated.Header{
		Len: 143, TxCode: "BKTR0001", GUID: guid, Flag: generated.FlagRequest,
		SrcOrg: "081", DstOrg: "999", RspCode: "", SentAt: "20261129103000",
	})
	out, err := h.AppendTo(nil)
	assert.NilError(t, err)
	assert.Equal(t, string(out), reqHeader)
}

func TestBodiesRoundTrip(t *testing.T) {
	cases := []struct {
		tx, body string
		request  bool
	}{
		{"BKTR0001", bktrBody, true},
		{"BKTR0001", bktrAnswer, false},
		{"BKIQ0001", bkiqBody, true},
		{"BKIQ0001", bkiqAnswer, false},
	}
	for _, tc := range cases {
		tx, ok := generated.LookupTransaction(tc.tx)
		assert.Assert(t, ok)
		var body interface {
			Decode(string) error
			AppendTo([]byte) ([]byte, error)
		} = tx.NewResponse()
		want := tx.ResponseLen
		if tc.request {
			body, want = tx.NewRequest(), tx.RequestLen
		}
		assert.Equal(t, len(tc.body), want, tc.tx)
		assert.NilError(t, body.Decode(tc.body), tc.tx)
		out, err := body.AppendTo(nil)
		assert.NilError(t, err)
		assert.Equal(t, string(out), tc.body)
	}
}

func TestDecodedValues(t *testing.T) {
	var r generated.BKTR0001Request
	assert.NilError(t, r.Decode(bktrBody))
	assert.DeepEqual(t, r, generated.BKTR0001Request{
		WdBank: "081", WdAcct: "11002003004005", DpBank: "004", DpAcct: "00012345678901",
		Amount: 50000, Memo: "rent",
	})
	var a generated.BKTR0001Response
	assert.NilError(t, a.Decode(bktrAnswer))
	assert.DeepEqual(t, a, generated.BKTR0001Response{CoreTxid: "T000000000000001", Balance: 950000, PostedAt: "20261129103001"})
}

// fieldErr asserts err is a *fixedwidth.FieldError for field with reason.
func fieldErr(t *testing.T, err error, layout, field string, offset int, reason string) {
	t.Helper()
	var fe *fixedwidth.FieldError
	assert.Assert(t, errors.As(err, &fe), "want a FieldError, got %v", err)
	assert.Equal(t, fe.Layout, layout)
	assert.Equal(t, fe.Field, field)
	assert.Equal(t, fe.Offset, offset)
	assert.Assert(t, is.Contains(fe.Reason, reason))
	assert.Assert(t, is.Contains(err.Error(), field))
}

func with(s string, at int, repl string) string { return s[:at] + repl + s[at+len(repl):] }

func TestDecodeFieldErrors(t *testing.T) {
	body := func(at int, repl string) string { return with(bktrBody, at, repl) }
	cases := []struct {
		name, body, field, reason string
		offset                    int
	}{
		{"letters in N", body(3, "1100200300400A"), "WD_ACCT", "not all digits", 83},
		{"space in N", body(34, " 000000050000"), "AMOUNT", "not all digits", 114},
		{"sign in N", body(34, "-000000050000"), "AMOUNT", "not all digits", 114},
		{"amount zero", body(34, "0000000000000"), "AMOUNT", "below the minimum 1", 114},
		{"code not in map", body(0, "999"), "WD_BANK", "not a code of map BANK", 80},
		{"deposit code not in map", body(17, "LHB"), "DP_BANK", "not a code of map BANK", 97},
		{"unprintable memo", body(47, "re\x01t"), "MEMO", "not printable", 127},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r generated.BKTR0001Request
			fieldErr(t, r.Decode(tc.body), "BKTR0001 request", tc.field, tc.offset, tc.reason)
		})
	}

	var r generated.BKTR0001Request
	var le *fixedwidth.LengthError
	assert.Assert(t, errors.As(r.Decode(bktrBody[:66]), &le))
	assert.Equal(t, le.Want, 67)

	var a generated.BKTR0001Response
	fieldErr(t, a.Decode(with(bktrAnswer, 31, "20261329103001")), "BKTR0001 response", "POSTED_AT", 111, "YYYYMMDDhhmmss")
}

func TestHeaderFieldErrors(t *testing.T) {
	cases := []struct {
		name, header, field string
	}{
		{"upper-case GUID", with(reqHeader, 12, "0123456789ABCDEF"), "GUID"},
		{"short GUID", with(reqHeader, 40, "abc "), "GUID"},
		{"flag", with(reqHeader, 44, "X"), "FLAG"},
		{"length prefix sign", with(reqHeader, 0, "+143"), "LEN"},
		{"length prefix space", with(reqHeader, 0, " 143"), "LEN"},
		{"bad time", with(reqHeader, 55, "20260230103000"), "SENT_AT"},
	}
	for _, tc := range cases {
		var h generated.Header
		err := h.Decode(tc.header)
		var fe *fixedwidth.FieldError
		assert.Assert(t, errors.As(err, &fe), tc.name)
		assert.Equal(t, fe.Field, tc.field, tc.name)
	}
}

func TestParseLengthPrefix(t *testing.T) {
	for _, ok := range []string{"0000", "0076", "0143", "9999"} {
		_, err := generated.ParseLengthPrefix(ok)
		assert.NilError(t, err, ok)
	}
	for _, bad := range []string{"", "143", "01430", "+143", "-143", " 143", "143 ", "0x10", "01.4", "١٢٣٤"} {
		_, err := generated.ParseLengthPrefix(bad)
		assert.ErrorContains(t, err, "ASCII digits", bad)
	}
	n, err := generated.ParseLengthPrefix("0143")
	assert.NilError(t, err)
	assert.Equal(t, n, 143)
}

func TestEncodeRefusesWhatDoesNotFit(t *testing.T) {
	valid := func() generated.BKTR0001Request {
		return generated.BKTR0001Request{WdBank: "081", WdAcct: "11002003004005", DpBank: "004", DpAcct: "1", Amount: 1, Memo: "x"}
	}
	cases := []struct {
		name   string
		edit   func(*generated.BKTR0001Request)
		field  string
		reason string
	}{
		{"memo too long", func(r *generated.BKTR0001Request) { r.Memo = strings.Repeat("m", 21) }, "MEMO", "longer than 20"},
		{"amount negative", func(r *generated.BKTR0001Request) { r.Amount = -5 }, "AMOUNT", "below the minimum"},
		{"amount zero", func(r *generated.BKTR0001Request) { r.Amount = 0 }, "AMOUNT", "below the minimum"},
		{"amount too wide", func(r *generated.BKTR0001Request) { r.Amount = 10_000_000_000_000 }, "AMOUNT", "more than 13 digits"},
		{"account too long", func(r *generated.BKTR0001Request) { r.WdAcct = "110020030040051" }, "WD_ACCT", "not 1 to 14 digits"},
		{"account letters", func(r *generated.BKTR0001Request) { r.DpAcct = "12a" }, "DP_ACCT", "digits"},
		{"unmapped code", func(r *generated.BKTR0001Request) { r.WdBank = "LHB" }, "WD_BANK", "not a code of map BANK"},
	}
	for _, tc := range cases {
		r := valid()
		tc.edit(&r)
		out, err := r.AppendTo([]byte("keep"))
		fieldErr(t, err, "BKTR0001 request", tc.field, map[string]int{"MEMO": 127, "AMOUNT": 114, "WD_ACCT": 83, "DP_ACCT": 100, "WD_BANK": 80}[tc.field], tc.reason)
		assert.Equal(t, string(out), "keep", "a refused encode leaves dst as it was")
	}
	r := valid()
	out, err := r.AppendTo(nil)
	assert.NilError(t, err)
	assert.Equal(t, string(out[20:34]), "00000000000001", "short account numbers are zero-padded on the left")
}

func TestAppendFrame(t *testing.T) {
	var h generated.Header
	assert.NilError(t, h.Decode(reqHeader))
	h.Len = 7 // ignored: AppendFrame computes LEN
	var r generated.BKTR0001Request
	assert.NilError(t, r.Decode(bktrBody))
	out, err := generated.AppendFrame(nil, &h, &r)
	assert.NilError(t, err)
	assert.Equal(t, string(out), bktrFrame)
	assert.Equal(t, h.Len, 7, "h is not modified")

	empty, err := generated.AppendFrame(nil, &h, nil)
	assert.NilError(t, err)
	assert.Equal(t, string(empty[:4]), "0076")
	assert.Equal(t, len(empty), generated.HeaderLen)
}

func TestRawHeader(t *testing.T) {
	h := generated.RawHeader([]byte("0010BKTR0001abc"))
	assert.Equal(t, h.TxCode, "BKTR0001")
	assert.Equal(t, h.GUID, "abc")
	assert.Equal(t, h.SrcOrg, "")
	h.RspCode = "E102"
	h.SrcOrg = "\x00\xffA"
	out := h.AppendRawTo(nil)
	assert.Equal(t, len(out), generated.HeaderLen)
	assert.Equal(t, string(out[:4]), "0076")
	assert.Equal(t, string(out[12:44]), "abc"+strings.Repeat(" ", 29))
	assert.Equal(t, string(out[45:48]), "  A")
	assert.Assert(t, fixedwidth.PrintableBytes(out))
}

func TestCodeMapBothWays(t *testing.T) {
	pairs := map[string]string{"081": "LHB", "004": "KBK", "088": "SHB", "020": "WRB"}
	for wire, core := range pairs {
		got, ok := generated.BankToCore(wire)
		assert.Assert(t, ok)
		assert.Equal(t, got, core)
		back, ok := generated.BankFromCore(core)
		assert.Assert(t, ok)
		assert.Equal(t, back, wire)
	}
	_, ok := generated.BankToCore("LHB")
	assert.Assert(t, !ok)
	_, ok = generated.BankFromCore("081")
	assert.Assert(t, !ok)
	assert.DeepEqual(t, generated.BankCodes(), []string{"081", "004", "088", "020"})
}

func TestRequestJSONMatchesSpec(t *testing.T) {
	var r generated.BKTR0001Request
	assert.NilError(t, r.Decode(with(bktrBody, 3, "00002003004005")))
	data, err := r.CoreJSON(guid)
	assert.NilError(t, err)
	// Exactly SPEC §3: keys, order, amount an integer, accounts strings with
	// their leading zeros, memo trimmed, banks as core ids.
	assert.Equal(t, string(data), `{"guid":"`+guid+`","wdBank":"LHB","wdAcct":"00002003004005","dpBank":"KBK","dpAcct":"00012345678901","amount":50000,"memo":"rent"}`)

	var back generated.BKTR0001Request
	g, err := back.FromCoreJSON(data)
	assert.NilError(t, err)
	assert.Equal(t, g, guid)
	assert.DeepEqual(t, back, r)
}

func TestResponseJSON(t *testing.T) {
	var a generated.BKTR0001Response
	assert.NilError(t, a.FromCoreJSON([]byte(`{"guid":"`+guid+`","txId":"T1","balance":950000,"postedAt":"20261129103000"}`)))
	assert.DeepEqual(t, a, generated.BKTR0001Response{CoreTxid: "T1", Balance: 950000, PostedAt: "20261129103000"})
	out, err := a.CoreJSON()
	assert.NilError(t, err)
	var m map[string]any
	assert.NilError(t, json.Unmarshal(out, &m))
	assert.DeepEqual(t, m, map[string]any{"txId": "T1", "balance": 950000.0, "postedAt": "20261129103000"})

	for _, bad := range []string{
		`{"txId":"T1","balance":1.5,"postedAt":"20261129103000"}`,
		`{"txId":"T1","balance":"100","postedAt":"20261129103000"}`,
		`{"txId":"T1","postedAt":"20261129103000"}`,
		`not json`,
	} {
		assert.Assert(t, a.FromCoreJSON([]byte(bad)) != nil, bad)
	}
	// A JSON value too long for its field decodes but is refused on encode.
	assert.NilError(t, a.FromCoreJSON([]byte(`{"txId":"T12345678901234567","balance":1,"postedAt":"20261129103000"}`)))
	_, err = a.AppendTo(nil)
	assert.ErrorContains(t, err, "CORE_TXID")
}

func TestRegistryAndPaths(t *testing.T) {
	// Every registered transaction is found by its code, in code order,
	// and its bodies say which transaction they belong to. The list is the
	// registry's: adding a layout never breaks this test.
	txs := generated.Transactions()
	assert.Assert(t, len(txs) >= 2)
	for i, tx := range txs {
		got, ok := generated.LookupTransaction(tx.Code)
		assert.Assert(t, ok && got == tx, tx.Code)
		if i > 0 {
			assert.Assert(t, txs[i-1].Code < tx.Code, "ordered by code")
		}
		assert.Equal(t, tx.NewRequest().TxCode(), tx.Code)
		assert.Equal(t, tx.NewRequest().Flag(), generated.FlagRequest)
		assert.Equal(t, tx.NewResponse().TxCode(), tx.Code)
		assert.Equal(t, tx.NewResponse().Flag(), generated.FlagResponse)
		assert.Equal(t, len(tx.RequestFields), len(tx.NewRequest().Fields()))
		switch tx.Settle {
		case generated.SettleByLookup:
			assert.Assert(t, strings.HasPrefix(tx.LookupPath, "/"), tx.Code)
		case generated.SettleAsNotPosted:
			assert.Equal(t, tx.Method, "GET", "only a read may be settled without a lookup")
			_, err := tx.NewRequest().LookupPath(guid)
			assert.ErrorIs(t, err, generated.ErrNoLookup)
		default:
			t.Fatalf("%s: settlement %d", tx.Code, tx.Settle)
		}
	}
	_, ok := generated.LookupTransaction("BKXX0001")
	assert.Assert(t, !ok)

	tr, _ := generated.LookupTransaction("BKTR0001")
	assert.Equal(t, tr.Method, "POST")
	assert.Assert(t, tr.JSONBody)
	iq, _ := generated.LookupTransaction("BKIQ0001")
	assert.Equal(t, iq.Method, "GET")
	assert.Assert(t, !iq.JSONBody)
	assert.Equal(t, iq.StatusSources[404], generated.SourceNoAccount)
	assert.Equal(t, len(tr.StatusSources), 0)

	req := iq.NewRequest()
	assert.NilError(t, req.Decode(bkiqBody))
	path, err := req.CorePath()
	assert.NilError(t, err)
	assert.Equal(t, path, "/v1/accounts/LHB/11002003004005")
	assert.Equal(t, iq.Settle, generated.SettleAsNotPosted)

	assert.Equal(t, tr.Settle, generated.SettleByLookup)
	assert.Equal(t, tr.LookupPath, "/v1/transfers/{guid}")
	path, err = tr.NewRequest().LookupPath(guid)
	assert.NilError(t, err)
	assert.Equal(t, path, "/v1/transfers/"+guid)
	assert.Equal(t, generated.ClientDefault(), tr)
}

// TestAppendFrameRefusesAnotherTransactionsBody: a frame's body must be of
// the transaction its header names, and of the FLAG it carries.
func TestAppendFrameRefusesAnotherTransactionsBody(t *testing.T) {
	txs := generated.Transactions()
	for _, tx := range txs {
		for _, other := range txs {
			if other == tx {
				continue
			}
			h := generated.Header{TxCode: tx.Code, GUID: guid, Flag: generated.FlagResponse, SrcOrg: "999", DstOrg: "081", RspCode: "0000", SentAt: "20261129103000"}
			_, err := generated.AppendFrame(nil, &h, other.NewResponse())
			assert.ErrorContains(t, err, "a "+other.Code+" body")
		}
		h := generated.Header{TxCode: tx.Code, GUID: guid, Flag: generated.FlagResponse, SrcOrg: "999", DstOrg: "081", RspCode: "0000", SentAt: "20261129103000"}
		_, err := generated.AppendFrame(nil, &h, tx.NewRequest())
		assert.ErrorContains(t, err, `with FLAG "S" does not go in`)
	}
}

func TestSetAndFields(t *testing.T) {
	tx, _ := generated.LookupTransaction("BKTR0001")
	req := tx.NewRequest()
	for k, v := range map[string]string{"wdBank": "LHB", "wdAcct": "11002003004005", "dpBank": "004", "dpAcct": "1", "amount": "100", "memo": "hi"} {
		assert.NilError(t, req.Set(k, v))
	}
	assert.ErrorContains(t, req.Set("amount", "1.5"), "not an integer")
	assert.ErrorContains(t, req.Set("nope", "1"), `no field with JSON key "nope"`)
	fields := req.Fields()
	assert.Equal(t, len(fields), 6)
	assert.DeepEqual(t, fields[0], generated.FieldValue{Name: "WD_BANK", JSON: "wdBank", Value: "081"})
	assert.DeepEqual(t, fields[1], generated.FieldValue{Name: "WD_ACCT", JSON: "wdAcct", Value: "11002003004005", Account: true})
	assert.Equal(t, fields[4].Value, "100")
}

func TestResponseCodeTable(t *testing.T) {
	// SPEC §4, source → code and ledger state.
	want := []struct {
		src   generated.Source
		code  generated.RspCode
		state string
	}{
		{generated.SourceHTTP200, "0000", "DONE"},
		{generated.SourceInsufficientFunds, "B201", "DONE"},
		{generated.SourceNoAccount, "B202", "DONE"},
		{generated.SourceLimitExceeded, "B203", "DONE"},
		{generated.SourceHTTP500, "E500", "DONE"},
		{generated.SourceReadTimeout, "E901", "UNKNOWN"},
		{generated.SourceConnectFail, "E902", "FAILED"},
		{generated.SourceUnknownTx, "E101", ""},
		{generated.SourceBadFrame, "E102", ""},
		{generated.SourceInProgress, "E903", ""},
		{generated.SourceGUIDReused, "E904", ""},
	}
	assert.Equal(t, len(generated.Sources()), len(want))
	for _, w := range want {
		assert.Equal(t, w.src.Code(), w.code)
		assert.Equal(t, w.src.LedgerState(), w.state, string(w.src))
		back, ok := w.code.Source()
		assert.Assert(t, ok)
		assert.Equal(t, back, w.src)
		assert.Assert(t, w.code.Meaning() != "unknown response code")
	}
	for _, r := range []string{"INSUFFICIENT_FUNDS", "NO_ACCOUNT", "LIMIT_EXCEEDED"} {
		s, ok := generated.SourceForResult(r)
		assert.Assert(t, ok)
		assert.Equal(t, string(s), r)
	}
	_, ok := generated.SourceForResult("HTTP500")
	assert.Assert(t, !ok, "only the core's 422 results are results")
}
