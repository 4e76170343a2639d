package relay

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"lhrelay/internal/ledger"
)

// BenchmarkLedgerRelay measures what the durable ledger costs: the same
// BKTR0001 transfers sent straight to the core over HTTP (direct), through
// the relay without a ledger (relay), and through the relay with a ledger
// file in b.TempDir() (ledger: WAL, synchronous=FULL, group commit), at
// concurrency 1, 16 and 64. Every mode gets a fresh in-process core and
// GUIDs never seen before (the ledger needs them unique; the others get
// them too, so the core does the same work in every mode).
//
// Each sub-benchmark reports tx/s, p50/p99 latency and the process's CPU use
// (cpu-%: user+system time over wall time × GOMAXPROCS; the core, the relay
// and the channels all run in this process, so 100 means CPU-bound); the
// ledger mode also reports commits/tx, the ledger's group commits (one
// fsync of the WAL each) per transfer: 2 would mean no grouping (a claim
// and an outcome per transfer). The parent logs the ledger/direct
// throughput ratio (shown with -v).
//
// Target: at concurrency 64 the relay with its ledger keeps at least 40% of
// direct throughput.
//
//	go test -run '^$' -bench LedgerRelay -benchtime 2s -v ./internal/relay/
//
// Everything shares the machine's CPUs, so run it on a quiet machine: the
// cpu-% of the direct runs (about 95 at concurrency 64 when nothing else
// runs) shows whether something else took CPU time.
func BenchmarkLedgerRelay(b *testing.B) {
	var seq atomic.Uint64 // GUIDs unique across the whole run
	nextGUID := func() uint64 { return seq.Add(1) }
	concs := []int{1, 16, 64}
	modes := []string{"direct", "relay", "ledger"}
	results := map[string]benchResult{}

	for _, conc := range concs {
		for _, mode := range modes {
			name := fmt.Sprintf("%s/c%d", mode, conc)
			b.Run(name, func(b *testing.B) {
				core := benchCore(b)
				client := benchClient(b, core.URL, conc)
				var workers func(int) func() error
				var led *ledger.Ledger
				switch mode {
				case "direct":
					workers = directWorkers(client, nextGUID)
				case "relay":
					workers = relayWorkers(b, startBenchRelay(b, client, conc, nil), nextGUID)
				case "ledger":
					var err error
					led, err = ledger.Open(filepath.Join(b.TempDir(), "relay.db"))
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { led.Close() }) // after the relay's Close (cleanups run last first)
					workers = relayWorkers(b, startBenchRelay(b, client, conc, led), nextGUID)
				}
				var commits0 uint64
				if led != nil {
					commits0 = led.Commits()
				}
				cpu0, wall0 := cpuTime(), time.Now()
				r := runLoad(b, conc, workers)
				cpu, wall := cpuTime()-cpu0, time.Since(wall0)
				r.cpu = 100 * cpu.Seconds() / (wall.Seconds() * float64(runtime.GOMAXPROCS(0)))
				b.ReportMetric(r.cpu, "cpu-%")
				if led != nil {
					r.commitsPerTx = float64(led.Commits()-commits0) / float64(b.N)
					b.ReportMetric(r.commitsPerTx, "commits/tx")
				}
				results[name] = r
			})
		}
	}

	for _, conc := range concs {
		d, r, l := results[fmt.Sprintf("direct/c%d", conc)], results[fmt.Sprintf("relay/c%d", conc)], results[fmt.Sprintf("ledger/c%d", conc)]
		if d.txps == 0 || r.txps == 0 || l.txps == 0 {
			continue // a filtered run
		}
		b.Logf("concurrency %2d: direct %6.0f tx/s p99 %8v | relay %6.0f tx/s p99 %8v (%3.0f%%) | ledger %6.0f tx/s p99 %8v (%3.0f%% of direct), %.3f commits/tx, %.0f commits/s, cpu %.0f%%",
			conc, d.txps, d.p99, r.txps, r.p99, 100*r.txps/d.txps,
			l.txps, l.p99, 100*l.txps/d.txps, l.commitsPerTx, l.commitsPerTx*l.txps, l.cpu)
	}
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
