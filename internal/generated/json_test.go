package generated_test

import (
	"encoding/json"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
)

// The oracles are the JSON forms the codecs had when encoding/json did the
// work: the generated reflection-free code must write and read exactly
// what they did.
type bktrRequestOracle struct {
	GUID   *string `json:"guid"`
	WdBank *string `json:"wdBank"`
	WdAcct *string `json:"wdAcct"`
	DpBank *string `json:"dpBank"`
	DpAcct *string `json:"dpAcct"`
	Amount *int64  `json:"amount"`
	Memo   *string `json:"memo"`
}

type bktrResponseOracle struct {
	CoreTxid *string `json:"txId"`
	Balance  *int64  `json:"balance"`
	PostedAt *string `json:"postedAt"`
}

// oracleResponse decodes data the way FromCoreJSON used to: ok false where
// it failed.
func oracleResponse(data []byte) (generated.BKTR0001Response, bool) {
	var j bktrResponseOracle
	if json.Unmarshal(data, &j) != nil || j.CoreTxid == nil || j.Balance == nil || j.PostedAt == nil {
		return generated.BKTR0001Response{}, false
	}
	return generated.BKTR0001Response{CoreTxid: *j.CoreTxid, Balance: *j.Balance, PostedAt: *j.PostedAt}, true
}

func TestCoreJSONMatchesEncodingJSON(t *testing.T) {
	for _, memo := range []string{"rent", "", `a"b\c`, "<b>&amp;</b>", "\x7f", "tab\there", "ünï", "\xff", "\u2028"} {
		r := generated.BKTR0001Request{WdBank: "081", WdAcct: "11002003004005", DpBank: "004", DpAcct: "1", Amount: -50000, Memo: memo}
		wdBank, dpBank, g := "LHB", "KBK", `gu"id<`
		want, err := json.Marshal(bktrRequestOracle{GUID: &g, WdBank: &wdBank, WdAcct: &r.WdAcct, DpBank: &dpBank, DpAcct: &r.DpAcct, Amount: &r.Amount, Memo: &r.Memo})
		assert.NilError(t, err)
		got, err := r.CoreJSON(g)
		assert.NilError(t, err)
		assert.Equal(t, string(got), string(want))
		// Appending keeps what dst holds.
		got, err = r.AppendCoreJSON([]byte("x"), g)
		assert.NilError(t, err)
		assert.Equal(t, string(got), "x"+string(want))
	}

	// A code outside its map appends nothing.
	r := generated.BKTR0001Request{WdBank: "081", DpBank: "999"}
	got, err := r.AppendCoreJSON([]byte("x"), guid)
	assert.ErrorContains(t, err, "DP_BANK")
	assert.Equal(t, string(got), "x")
	data, err := r.CoreJSON(guid)
	assert.Assert(t, err != nil && data == nil)

	a := generated.BKTR0001Response{CoreTxid: "T<1>", Balance: 950000, PostedAt: "20261129103001"}
	want, err := json.Marshal(bktrResponseOracle{CoreTxid: &a.CoreTxid, Balance: &a.Balance, PostedAt: &a.PostedAt})
	assert.NilError(t, err)
	got, err = a.CoreJSON()
	assert.NilError(t, err)
	assert.Equal(t, string(got), string(want))
}

// responseBodies are core answers for FromCoreJSON, each read as the
// encoding/json version read it.
var responseBodies = []string{
	`{"guid":"` + guid + `","txId":"T1","balance":950000,"postedAt":"20261129103000"}`,
	` { "postedAt" : "20261129103000" , "balance" : 0 , "txId" : "" } `,
	`{"TXID":"T1","Balance":1,"POSTEDAT":"20261129103000"}`,
	"{\"txI\u212a\":\"T1\",\"balance\":1,\"po\u017ftedAt\":\"20261129103000\"}",
	`{"tx\u0049d":"T\u00e9\n","balance":1,"postedAt":"20261129103000"}`,
	`{"txId":"T1","txId":"T2","balance":1,"postedAt":"20261129103000"}`,
	`{"txId":"T1","balance":1,"balance":null,"postedAt":"20261129103000"}`,
	`{"txId":null,"txId":"T1","balance":1,"postedAt":"20261129103000"}`,
	`{"extra":{"txId":5,"a":[1,{"b":null}]},"txId":"T1","balance":1,"postedAt":"20261129103000"}`,
	`{"txId":"T1","balance":9223372036854775807,"postedAt":"x"}`,
	`{"txId":"T1","balance":9223372036854775808,"postedAt":"x"}`,
	`{"txId":"T1","balance":-1,"postedAt":"x"}`,
	`{"txId":"T1","balance":1.5,"postedAt":"20261129103000"}`,
	`{"txId":"T1","balance":1e3,"postedAt":"20261129103000"}`,
	`{"txId":"T1","balance":"100","postedAt":"20261129103000"}`,
	`{"txId":1,"balance":1,"postedAt":"20261129103000"}`,
	`{"txId":"T1","postedAt":"20261129103000"}`,
	`{"txId":"T1","balance":1,"postedAt":"20261129103000"} x`,
	`{"txId":"T1","balance":1,"postedAt":"20261129103000",}`,
	`{"txId":"T1\x01","balance":1,"postedAt":"20261129103000"}`,
	`[]`, `null`, `not json`, ``,
}

func TestFromCoreJSONAgreesWithEncodingJSON(t *testing.T) {
	for _, body := range responseBodies {
		checkFromCoreJSON(t, []byte(body))
	}
}

func FuzzResponseFromCoreJSON(f *testing.F) {
	for _, body := range responseBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkFromCoreJSON(t, data) })
}

func checkFromCoreJSON(t *testing.T, data []byte) {
	t.Helper()
	want, ok := oracleResponse(data)
	before := generated.BKTR0001Response{CoreTxid: "before"}
	got := before
	err := got.FromCoreJSON(data)
	if !ok {
		assert.Assert(t, err != nil, "%q decoded to %+v", data, got)
		assert.Equal(t, got, before, "%q: a failed decoding leaves the body as it was", data)
		return
	}
	assert.NilError(t, err, "%q", data)
	assert.Equal(t, got, want, "%q", data)
}

func TestRequestFromCoreJSONMissingAndMapped(t *testing.T) {
	var r generated.BKTR0001Request
	_, err := r.FromCoreJSON([]byte(`{"wdBank":"LHB","wdAcct":"1","dpBank":"KBK","dpAcct":"2","amount":1,"memo":"m"}`))
	assert.ErrorContains(t, err, "missing key guid")
	_, err = r.FromCoreJSON([]byte(`{"guid":"g","wdBank":"LHB","wdAcct":"1","dpBank":"XXX","dpAcct":"2","amount":1,"memo":"m"}`))
	assert.ErrorContains(t, err, `dpBank: "XXX" is not in code map BANK`)
	assert.Equal(t, r, generated.BKTR0001Request{}, "left as it was")
	g, err := r.FromCoreJSON([]byte(`{"GUID":"g","wdBank":"LHB","wdAcct":"1","dpBank":"KBK","dpAcct":"2","amount":1,"memo":"m","amount":7}`))
	assert.NilError(t, err)
	assert.Equal(t, g, "g")
	assert.Equal(t, r, generated.BKTR0001Request{WdBank: "081", WdAcct: "1", DpBank: "004", DpAcct: "2", Amount: 7, Memo: "m"})
}

// TestJSONAllocations: the request is written into the caller's buffer
// without allocating, and the answer read with one string conversion.
func TestJSONAllocations(t *testing.T) {
	var r generated.BKTR0001Request
	assert.NilError(t, r.Decode(bktrBody))
	buf := make([]byte, 0, 256)
	assert.Equal(t, testing.AllocsPerRun(100, func() {
		buf, _ = r.AppendCoreJSON(buf[:0], guid)
	}), 0.0)
	answer := []byte(responseBodies[0])
	var a generated.BKTR0001Response
	assert.Equal(t, testing.AllocsPerRun(100, func() {
		if err := a.FromCoreJSON(answer); err != nil {
			t.Fatal(err)
		}
	}), 1.0)
}

// BenchmarkCoreJSON is the JSON part of a transfer: the request written
// into a reused buffer, and the core's answer read.
func BenchmarkCoreJSON(b *testing.B) {
	var r generated.BKTR0001Request
	if err := r.Decode(bktrBody); err != nil {
		b.Fatal(err)
	}
	answer := []byte(`{"guid":"` + guid + `","txId":"T000000000000001","balance":950000,"postedAt":"20261129103001"}`)
	b.Run("append-request", func(b *testing.B) {
		buf := make([]byte, 0, 256)
		b.ReportAllocs()
		for b.Loop() {
			var err error
			if buf, err = r.AppendCoreJSON(buf[:0], guid); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("request", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.CoreJSON(guid); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("response", func(b *testing.B) {
		var a generated.BKTR0001Response
		b.ReportAllocs()
		for b.Loop() {
			if err := a.FromCoreJSON(answer); err != nil {
				b.Fatal(err)
			}
		}
	})
}
