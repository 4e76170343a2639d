package channel_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/channel"
	"lhrelay/internal/fixedwidth"
	"lhrelay/internal/generated"
)

const guid = "0123456789abcdef0123456789abcdef"

var sentAt = time.Date(2026, 11, 29, 10, 30, 0, 0, time.Local)

// Expected frames are written out by hand from SPEC §1–§2 (prefix, 80-byte
// header, body), so the tests check the builder against the contract.
const (
	hdrTail   = "S" + "081" + "999" + "    " + "20261129103000" + "           "
	bktrBody  = "081" + "11002003004005" + "004" + "00012345678901" + "0000000050000" + "rent                "
	bktrFrame = "0143" + "BKTR0001" + guid + hdrTail + bktrBody
	bkiqBody  = "088" + "00000000012345"
	bkiqFrame = "0093" + "BKIQ0001" + guid + hdrTail + bkiqBody
)

var bktrFields = map[string]string{
	"wdBank": "081", "wdAcct": "11002003004005", "dpBank": "KBK", "dpAcct": "12345678901",
	"amount": "50000", "memo": "rent",
}

func TestBuildRequestExactBytes(t *testing.T) {
	frame, err := channel.BuildRequest("BKTR0001", guid, bktrFields, sentAt)
	assert.NilError(t, err)
	assert.Equal(t, string(frame), bktrFrame)
	assert.Equal(t, len(frame), generated.HeaderLen+generated.BKTR0001RequestLen)

	frame, err = channel.BuildRequest("BKIQ0001", guid, map[string]string{"bank": "SHB", "acct": "12345"}, sentAt)
	assert.NilError(t, err)
	assert.Equal(t, string(frame), bkiqFrame)
	assert.Equal(t, len(frame), generated.HeaderLen+generated.BKIQ0001RequestLen)
}

func TestRequestOrgsAndSentAt(t *testing.T) {
	now := time.Now()
	r := channel.Request{GUID: guid, SrcOrg: "020", DstOrg: "ABC", Fields: bktrFields}
	frame, err := r.Frame(now)
	assert.NilError(t, err)
	h, body, err := channel.DecodeRequest(frame)
	assert.NilError(t, err)
	assert.Equal(t, h.TxCode, generated.ClientDefault().Code)
	assert.Equal(t, h.Flag, generated.FlagRequest)
	assert.Equal(t, h.SrcOrg, "020")
	assert.Equal(t, h.DstOrg, "ABC")
	assert.Equal(t, h.RspCode, "")
	assert.Assert(t, fixedwidth.ValidTimestamp(h.SentAt))
	assert.Equal(t, h.SentAt, now.Format("20060102150405"))
	assert.Equal(t, body.Fields()[2].Value, "004") // KBK mapped to its wire code
}

func TestAppendFrameKeepsDst(t *testing.T) {
	dst := []byte("prefix")
	out, err := channel.Request{Tx: "BKTR0001", GUID: guid, Fields: bktrFields}.AppendFrame(dst, sentAt)
	assert.NilError(t, err)
	assert.Equal(t, string(out), "prefix"+bktrFrame)

	bad := map[string]string{"bank": "LHB", "acct": "x"}
	out, err = channel.Request{Tx: "BKIQ0001", GUID: guid, Fields: bad}.AppendFrame(dst, sentAt)
	assert.Assert(t, err != nil)
	assert.Equal(t, string(out), "prefix")
}

func with(key, value string) map[string]string {
	m := map[string]string{}
	for k, v := range bktrFields {
		m[k] = v
	}
	if value == "<delete>" {
		delete(m, key)
	} else {
		m[key] = value
	}
	return m
}

func TestBuildRequestErrors(t *testing.T) {
	cases := []struct {
		name, tx, guid string
		fields         map[string]string
		want           []string
	}{
		{"unknown tx", "BKXX0001", guid, bktrFields, []string{`unknown transaction "BKXX0001"`, "(registered: " + strings.Join(channel.TxCodes(), ", ") + ")"}},
		{"unknown key", "BKTR0001", guid, with("color", "red"), []string{`no request field with JSON key "color"`, "wdBank, wdAcct"}},
		{"key of another tx", "BKTR0001", guid, with("acct", "1"), []string{`JSON key "acct"`}},
		{"amount not integer", "BKTR0001", guid, with("amount", "12.5"), []string{"amount", `"12.5" is not an integer`}},
		{"amount zero", "BKTR0001", guid, with("amount", "0"), []string{"amount:", "AMOUNT", "below the minimum 1"}},
		{"amount too wide", "BKTR0001", guid, with("amount", "99999999999999"), []string{"AMOUNT", "more than 13 digits"}},
		{"account with letters", "BKTR0001", guid, with("wdAcct", "1100200300400A"), []string{"wdAcct:", "WD_ACCT", "not 1 to 14 digits", "1100200300400A"}},
		{"account too long", "BKTR0001", guid, with("dpAcct", "123456789012345"), []string{"dpAcct:", "DP_ACCT"}},
		{"code not in map", "BKTR0001", guid, with("wdBank", "999"), []string{"wdBank:", "WD_BANK", "not a code of map BANK", `"999"`}},
		{"memo too long", "BKTR0001", guid, with("memo", strings.Repeat("m", 21)), []string{"memo:", "MEMO", "longer than 20"}},
		{"memo not ascii", "BKTR0001", guid, with("memo", "café"), []string{"MEMO", "not printable"}},
		{"missing field", "BKTR0001", guid, with("dpAcct", "<delete>"), []string{"no value for dpAcct"}},
		{"guid upper case", "BKTR0001", strings.ToUpper(guid), bktrFields, []string{"guid", "32 lowercase hex digits"}},
		{"guid short", "BKTR0001", guid[:31], bktrFields, []string{"guid", "32 lowercase hex"}},
		{"guid empty", "BKTR0001", "", bktrFields, []string{`guid ""`}},
		{"org too long", "BKTR0001", guid, bktrFields, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := channel.Request{Tx: tc.tx, GUID: tc.guid, Fields: tc.fields}
			if tc.want == nil {
				r.SrcOrg = "0811"
				tc.want = []string{"SRC_ORG", "longer than 3 bytes"}
			}
			_, err := r.Frame(sentAt)
			assert.Assert(t, err != nil)
			for _, w := range tc.want {
				assert.Assert(t, is.Contains(err.Error(), w))
			}
			assert.Assert(t, !strings.Contains(err.Error(), "\n"))
		})
	}
}

func TestNewGUID(t *testing.T) {
	a, b := channel.NewGUID(), channel.NewGUID()
	assert.Assert(t, channel.ValidGUID(a), a)
	assert.Equal(t, len(a), 32)
	assert.Assert(t, a != b)
	assert.Assert(t, !channel.ValidGUID(strings.ToUpper(a)))
	assert.Assert(t, !channel.ValidGUID(a+"0"))
}

func TestKebabCamel(t *testing.T) {
	cases := []struct{ key, flag string }{
		{"wdBank", "wd-bank"}, {"dpAcct", "dp-acct"}, {"amount", "amount"}, {"txId", "tx-id"},
		{"asOf", "as-of"}, {"coreTXID", "core-txid"}, {"a", "a"},
	}
	for _, tc := range cases {
		assert.Equal(t, channel.KebabFlag(tc.key), tc.flag, tc.key)
	}
	for _, k := range []string{"wdBank", "dpAcct", "amount", "txId", "asOf", "memo"} {
		assert.Equal(t, channel.CamelKey(channel.KebabFlag(k)), k)
	}
	assert.Equal(t, channel.CamelKey("wd-bank"), "wdBank")
	// Acronyms do not survive the round trip: lhsend then uses the key as the flag.
	assert.Assert(t, channel.CamelKey(channel.KebabFlag("coreTXID")) != "coreTXID")
}

func TestKeysAndDefaults(t *testing.T) {
	tx, err := channel.LookupTx("BKTR0001")
	assert.NilError(t, err)
	assert.DeepEqual(t, channel.RequestKeys(tx), []string{"wdBank", "wdAcct", "dpBank", "dpAcct", "amount", "memo"})
	// The union of every registered transaction's keys, each once: taken
	// from the registry, so that a new layout does not break this test.
	all := channel.AllRequestKeys()
	for _, tx := range generated.Transactions() {
		for _, k := range channel.RequestKeys(tx) {
			assert.Assert(t, is.Contains(all, k))
		}
	}
	for i, k := range all {
		assert.Assert(t, !slices.Contains(all[:i], k), "%s twice", k)
	}

	given := map[string]string{"amount": "7"}
	f := channel.WithDefaults(tx, given)
	assert.DeepEqual(t, given, map[string]string{"amount": "7"}) // not modified
	assert.Equal(t, f["amount"], "7")
	assert.Equal(t, f["wdAcct"], "11002003004007")
	_, hasBank := f["bank"]
	assert.Assert(t, !hasBank, "defaults only for the transaction's own keys")
	_, err = channel.BuildRequest("BKTR0001", guid, f, sentAt)
	assert.NilError(t, err)

	// Every transaction whose layout gives each request field a default
	// builds a frame from its defaults alone.
	for _, tx := range generated.Transactions() {
		complete := true
		for _, f := range tx.RequestFields {
			complete = complete && f.HasDefault
		}
		if complete {
			_, err = channel.BuildRequest(tx.Code, guid, channel.WithDefaults(tx, nil), sentAt)
			assert.NilError(t, err, tx.Code)
		}
	}
}

func TestJSONRequests(t *testing.T) {
	in := `{"tx":"BKTR0001","guid":"` + guid + `","wdBank":"081","wdAcct":"11002003004005",
	        "dpBank":"KBK","dpAcct":"12345678901","amount":50000,"memo":"rent"}
	       {"tx":"BKIQ0001","bank":"SHB","acct":12345}`
	reqs, err := channel.ReadJSONRequests(strings.NewReader(in))
	assert.NilError(t, err)
	assert.Equal(t, len(reqs), 2)
	assert.Equal(t, reqs[0].Tx, "BKTR0001")
	assert.Equal(t, reqs[0].GUID, guid)
	assert.DeepEqual(t, reqs[0].Fields, bktrFields)
	frame, err := reqs[0].Frame(sentAt)
	assert.NilError(t, err)
	assert.Equal(t, string(frame), bktrFrame)

	assert.Equal(t, reqs[1].GUID, "")
	reqs[1].GUID = guid
	frame, err = reqs[1].Frame(sentAt)
	assert.NilError(t, err)
	assert.Equal(t, string(frame), bkiqFrame)
}

func TestJSONRequestErrors(t *testing.T) {
	cases := []struct{ in, want string }{
		{``, "no JSON request object"},
		{`{"amount": true}`, `key "amount": want a string or a number, got a boolean`},
		{`{"memo": {"a":1}}`, `key "memo": want a string or a number, got an object`},
		{`{"memo": null}`, `got null`},
		{`{"tx": 1}`, `key "tx": want a string, got a number`},
		{`{"guid": ["x"]}`, `key "guid": want a string, got an array`},
		{`[1,2]`, "JSON request 1"},
		{`null`, "want an object, got null"},
		{`{"amount": 1} {"amount": `, "JSON request 2"},
	}
	for _, tc := range cases {
		_, err := channel.ReadJSONRequests(strings.NewReader(tc.in))
		assert.ErrorContains(t, err, tc.want, tc.in)
	}
	// Values are checked when the frame is built, with the layout's message.
	r, err := channel.ParseJSONRequest([]byte(`{"guid":"` + guid + `","amount":12.5}`))
	assert.NilError(t, err)
	tx, _ := channel.LookupTx("BKTR0001")
	r.Fields = channel.WithDefaults(tx, r.Fields)
	_, err = r.Frame(sentAt)
	assert.ErrorContains(t, err, `amount: "12.5" is not an integer`)

	_, err = channel.ParseJSONRequest([]byte(`{} {}`))
	assert.ErrorContains(t, err, "want one JSON request object, got 2")
}
