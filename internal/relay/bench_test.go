package relay

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

// benchResult is what one sub-benchmark measured.
type benchResult struct {
	txps     float64
	p50, p99 time.Duration
	// Set by BenchmarkLedgerRelay only.
	cpuPerTx     time.Duration // CPU time per transfer, core's included
	cpu          float64       // percent of the machine's CPUs used, core's included
	commitsPerTx float64       // ledger group commits (fsyncs) per transfer; PostgreSQL: WAL flushes
	writesPerTx  float64       // PostgreSQL: write transactions per transfer
	dbCPUPerTx   time.Duration // PostgreSQL: the database server's CPU time per transfer
}

// BenchmarkRelayOverhead sends the same BKTR0001 transfers through the
// relay (TCP, no ledger) and straight to the same core (benchCore) over HTTP
// (with corecall, the code the relay itself uses, so the difference is
// what the relay adds: a TCP hop, framing, validation, answer building), at
// concurrency 1 and 64. Each sub-benchmark reports tx/s and p50/p99 latency;
// the parent logs the relay/direct throughput ratio and the p50 overhead.
//
// Targets: the relay keeps at least 70% of direct throughput at concurrency
// 64, and adds less than 150µs at p50 at concurrency 1.
//
//	go test -run '^$' -bench RelayOverhead -benchtime 2s ./internal/relay/
func BenchmarkRelayOverhead(b *testing.B) {
	core := benchCore(b)
	// GUIDs cycle through a fixed set: without a ledger nothing checks
	// them, and the simulator keeps a record per distinct GUID, which would
	// otherwise grow with b.N and slow later runs with GC work.
	var seq atomic.Uint64
	nextGUID := func() uint64 { return seq.Add(1) % (1 << 16) }
	results := map[string]benchResult{}

	for _, conc := range []int{1, 64} {
		name := fmt.Sprintf("direct/c%d", conc)
		b.Run(name, func(b *testing.B) {
			results[name] = runLoad(b, conc, directWorkers(benchClient(b, core.URL, conc), nextGUID))
		})

		name = fmt.Sprintf("relay/c%d", conc)
		b.Run(name, func(b *testing.B) {
			addr := startBenchRelay(b, benchClient(b, core.URL, conc), conc, nil)
			results[name] = runLoad(b, conc, relayWorkers(b, addr, nextGUID))
		})
	}

	for _, conc := range []int{1, 64} {
		d, r := results[fmt.Sprintf("direct/c%d", conc)], results[fmt.Sprintf("relay/c%d", conc)]
		if d.txps == 0 || r.txps == 0 {
			continue // a filtered run
		}
		b.Logf("concurrency %d: direct %.0f tx/s p50 %v p99 %v | relay %.0f tx/s p50 %v p99 %v | relay keeps %.0f%% of throughput, adds %v at p50",
			conc, d.txps, d.p50, d.p99, r.txps, r.p50, r.p99, 100*r.txps/d.txps, r.p50-d.p50)
	}
}

// benchBody is the transfer every benchmark sends: 1 won from an account
// the simulator gives a balance that never runs dry.
var benchBody = &generated.BKTR0001Request{WdBank: "081", WdAcct: acctRich, DpBank: "004", DpAcct: acctOther, Amount: 1, Memo: "bench"}

// benchClient is a core client sized for conc calls at once.
func benchClient(b *testing.B, url string, conc int) *corecall.Client {
	c, err := corecall.New(corecall.Config{BaseURL: url, Timeout: 10 * time.Second, MaxIdleConns: max(conc, 2)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.CloseIdleConnections)
	return c
}

// directWorkers makes runLoad's workers for calls straight to the core
// with corecall, the code the relay itself uses, so that the difference to
// relayWorkers is what the relay adds.
func directWorkers(client *corecall.Client, nextGUID func() uint64) func(int) func() error {
	tx := testkit.TransferTx()
	return func(int) func() error {
		var g [32]byte
		return func() error {
			guid := string(appendGUID(g[:0], nextGUID()))
			res := client.Call(context.Background(), tx, guid, benchBody)
			if res.Source != generated.SourceHTTP200 {
				return fmt.Errorf("direct: %s: %v", res.Source, res.Err)
			}
			return nil
		}
	}
}

// startBenchRelay starts a relay in front of client, with led as its
// ledger (nil: none), and returns its address. It is closed when the
// benchmark run ends.
func startBenchRelay(b *testing.B, client *corecall.Client, conc int, led Ledger) string {
	return startBenchRelayTLS(b, client, conc, led, nil)
}

// startBenchRelayTLS is startBenchRelay serving channels over TLS with
// cfg (nil: plain TCP).
func startBenchRelayTLS(b *testing.B, client *corecall.Client, conc int, led Ledger, cfg *tls.Config) string {
	srv, addr := serveBench(b, Config{Core: client, Ledger: led, MaxConns: conc + 8, MaxConnsPerAddr: conc + 8, TLS: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	b.Cleanup(func() { srv.Close() })
	return addr
}

// serveBench starts a relay with cfg on a free loopback port; the caller
// closes it.
func serveBench(b *testing.B, cfg Config) (*Server, string) {
	b.Helper()
	srv, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	return srv, ln.Addr().String()
}

// relayWorkers makes runLoad's workers for channels: one connection each,
// sending BKTR0001 frames one after another and expecting 0000.
func relayWorkers(b *testing.B, addr string, nextGUID func() uint64) func(int) func() error {
	return dialWorkers(b, func() (net.Conn, error) { return net.Dial("tcp", addr) }, nextGUID)
}

// dialWorkers is relayWorkers over connections made by dial.
func dialWorkers(b *testing.B, dial func() (net.Conn, error), nextGUID func() uint64) func(int) func() error {
	template, err := generated.AppendFrame(nil, header(testkit.GUID(), testkit.TransferTx().Code), benchBody)
	if err != nil {
		b.Fatal(err)
	}
	return func(int) func() error {
		conn, err := dial()
		if err != nil {
			b.Fatal(err)
		}
		// A channel reads through a buffer, as any sensible client
		// does: the prefix and the rest in one read.
		br := bufio.NewReader(conn)
		frame := slices.Clone(template)
		var answer []byte
		return func() error {
			appendGUID(frame[12:12], nextGUID()) // the GUID field, in place
			if _, err := conn.Write(frame); err != nil {
				return err
			}
			answer, err = wire.ReadFrame(br, answer[:0])
			if err != nil {
				return err
			}
			if code := answer[51:55]; string(code) != string(generated.RspHTTP200) {
				return fmt.Errorf("relay answered %s", code)
			}
			return nil
		}
	}
}

// appendGUID writes n as 32 lowercase hex digits.
func appendGUID(dst []byte, n uint64) []byte {
	const hex = "0123456789abcdef"
	var g [32]byte
	for i := range g {
		g[i] = '0'
	}
	for i := len(g) - 1; n > 0; i-- {
		g[i] = hex[n&0xf]
		n >>= 4
	}
	return append(dst, g[:]...)
}

// runLoad runs b.N operations on conc workers (each with its own state,
// made by newWorker before the timer starts) and reports tx/s, p50 and p99.
func runLoad(b *testing.B, conc int, newWorker func(int) func() error) benchResult {
	workers := make([]func() error, conc)
	for i := range workers {
		workers[i] = newWorker(i)
	}
	lat := make([][]time.Duration, conc)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conc)
	b.ResetTimer()
	start := time.Now()
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op := workers[w]
			mine := make([]time.Duration, 0, b.N/conc+1)
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := op(); err != nil {
					errs <- err
					return
				}
				mine = append(mine, time.Since(t0))
			}
			lat[w] = mine
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	r := benchResult{txps: float64(len(all)) / elapsed.Seconds()}
	if len(all) > 0 {
		r.p50 = all[len(all)*50/100]
		r.p99 = all[min(len(all)*99/100, len(all)-1)]
	}
	b.ReportMetric(r.txps, "tx/s")
	b.ReportMetric(float64(r.p50.Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(r.p99.Nanoseconds())/1e3, "p99-µs")
	return r
}
