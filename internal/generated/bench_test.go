package generated_test

import (
	"testing"

	"lhrelay/internal/generated"
	"lhrelay/internal/wire"
	"time"
)

// BenchmarkDecodeRequestFrame decodes a whole BKTR0001 request frame the way
// the relay does: one string conversion, the header, the registry lookup and
// the body. Target: < 300 ns/op, ≤ 2 allocs/op.
func BenchmarkDecodeRequestFrame(b *testing.B) {
	frame := []byte(bktrFrame)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for i := 0; i < b.N; i++ {
		s := string(frame)
		var h generated.Header
		if err := h.Decode(s[:generated.HeaderLen]); err != nil {
			b.Fatal(err)
		}
		tx, ok := generated.LookupTransaction(h.TxCode)
		if !ok {
			b.Fatal("unknown tx")
		}
		req := tx.NewRequest()
		if err := req.Decode(s[generated.HeaderLen:]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeResponseFrame encodes a BKTR0001 0000 answer, header and
// body, into a fresh buffer. Target: < 200 ns/op, ≤ 1 alloc/op.
func BenchmarkEncodeResponseFrame(b *testing.B) {
	var req generated.Header
	if err := req.Decode(reqHeader); err != nil {
		b.Fatal(err)
	}
	h := wire.ResponseHeader(&req, generated.RspHTTP200, time.Date(2026, 11, 29, 10, 30, 1, 0, time.Local))
	body := &generated.BKTR0001Response{CoreTxid: "T000000000000001", Balance: 950000, PostedAt: "20261129103001"}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		out, err := generated.AppendFrame(make([]byte, 0, generated.HeaderLen+generated.BKTR0001ResponseLen), &h, body)
		if err != nil || len(out) != generated.HeaderLen+generated.BKTR0001ResponseLen {
			b.Fatal(err)
		}
	}
}
