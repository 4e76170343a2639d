package relay

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/testkit"
)

// BenchmarkFrameLineFormats is the cost of one frame's info line after a
// core call, in each log format, with the latencies a real frame has (a
// zero float costs slog's JSON handler nothing; any other goes through
// json.Marshal, which boxes it).
func BenchmarkFrameLineFormats(b *testing.B) {
	for _, bc := range []struct {
		name    string
		handler slog.Handler
	}{
		{"text", slog.NewTextHandler(io.Discard, nil)},
		{"json", slog.NewJSONHandler(io.Discard, nil)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			benchFrameDone(b, &Server{log: slog.New(bc.handler), base: context.Background()}, 1234*time.Microsecond,
				corecall.Result{Status: 200, Elapsed: 876 * time.Microsecond})
		})
	}
}

// benchFrameDone measures s's frameDone for a transfer answered 0000
// after a core call: took is the frame's time so far, res the call's.
func benchFrameDone(b *testing.B, s *Server, took time.Duration, res corecall.Result) {
	c := &conn{s: s, remote: "127.0.0.1:40000"}
	tx := testkit.TransferTx()
	req := tx.NewRequest()
	frame := transferFrame(b, testkit.GUID())
	if err := req.Decode(string(frame[generated.HeaderLen:])); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		st := frameState{frame: frame, start: time.Now().Add(-took), txCode: tx.Code, guid: "0123456789abcdef0123456789abcdef", tx: tx, req: req,
			rsp: generated.RspHTTP200, state: ledger.StateDone, attempts: 1, claim: ledger.Owned, called: true, res: res}
		c.frameDone(&st)
	}
}
