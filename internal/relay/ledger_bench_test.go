package relay

import (
	"flag"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"lhrelay/internal/corecall"
	"lhrelay/internal/ledger"
)

var benchRounds = flag.Int("bench-rounds", 1,
	"BenchmarkLedgerRelay: how many times to run the direct, relay and ledger legs, one after another, at each concurrency")

// BenchmarkLedgerRelay measures what the durable ledger costs: the same
// BKTR0001 transfers sent straight to the core over HTTP (direct), through
// the relay without a ledger (relay), and through the relay with a ledger
// file in b.TempDir() (ledger: WAL, synchronous=FULL, group commit), at
// concurrency 1, 16 and 64. Every leg gets a fresh core (see benchCore and
// -bench-core for where it runs) and GUIDs never seen before (the ledger
// needs them unique; the others get them too, so the core does the same
// work in every leg).
//
// Each sub-benchmark reports tx/s, p50/p99 latency, cpu-µs/tx (CPU time
// per transfer of the benchmark process and the core's process together:
// channels, relay, ledger and core) and cpu-% (that CPU time over wall time
// × the machine's CPUs: 100 means CPU-bound). The ledger leg also reports
// commits/tx, the ledger's group commits (one fsync of the WAL each) per
// transfer: 2 would mean no grouping (a claim and an outcome per
// transfer). The parent logs, per concurrency, the ledger/direct
// throughput ratio of each round and their median (shown with -v).
//
// Target: at concurrency 64 the relay with its ledger keeps at least 40% of
// direct throughput.
//
//	go test -run '^$' -bench LedgerRelay -benchtime 2s -v ./internal/relay/ -bench-rounds 5
//
// The legs of one round run one after another, so a ratio compares
// neighbours in time; on a shared machine whose speed drifts, the median of
// several rounds says more than any one. -bench-core inprocess runs the core
// in this process instead.
func BenchmarkLedgerRelay(b *testing.B) {
	var seq atomic.Uint64 // GUIDs unique across the whole run
	nextGUID := func() uint64 { return seq.Add(1) }
	concs := []int{1, 16, 64}
	modes := []string{"direct", "relay", "ledger", "pgledger"}
	rounds := max(*benchRounds, 1)
	results := map[string]benchResult{}
	key := func(mode string, conc, round int) string {
		if rounds == 1 {
			return fmt.Sprintf("%s/c%d", mode, conc)
		}
		return fmt.Sprintf("%s/c%d/r%d", mode, conc, round)
	}

	for _, conc := range concs {
		for round := 1; round <= rounds; round++ {
			for _, mode := range modes {
				name := key(mode, conc, round)
				b.Run(name, func(b *testing.B) {
					results[name] = runLedgerLeg(b, mode, conc, nextGUID)
				})
			}
		}
	}

	pgRatios := map[int][]float64{}
	for _, conc := range concs {
		var ratios []float64
		for round := 1; round <= rounds; round++ {
			d, r, l, pg := results[key("direct", conc, round)], results[key("relay", conc, round)], results[key("ledger", conc, round)], results[key("pgledger", conc, round)]
			if pg.txps > 0 && l.txps > 0 {
				pgRatios[conc] = append(pgRatios[conc], 100*pg.txps/l.txps)
				b.Logf("concurrency %2d round %d: sqlite %6.0f tx/s p99 %8v %.3f commits/tx | postgres %6.0f tx/s p99 %8v (%3.0f%% of sqlite), %.3f WAL flushes/tx, %.2f write transactions/tx, db server %4.0f cpu-µs/tx, all processes %4.0f cpu-µs/tx, cpu %.0f%%",
					conc, round, l.txps, l.p99, l.commitsPerTx,
					pg.txps, pg.p99, 100*pg.txps/l.txps, pg.commitsPerTx, pg.writesPerTx, micros(pg.dbCPUPerTx), micros(pg.cpuPerTx), pg.cpu)
			}
			if d.txps == 0 || r.txps == 0 || l.txps == 0 {
				continue // a filtered run
			}
			ratios = append(ratios, 100*l.txps/d.txps)
			b.Logf("concurrency %2d round %d: direct %6.0f tx/s p99 %8v %4.0f cpu-µs/tx | relay %6.0f tx/s p99 %8v %4.0f cpu-µs/tx (%3.0f%%) | ledger %6.0f tx/s p99 %8v %4.0f cpu-µs/tx (%3.0f%% of direct), %.3f commits/tx, %.0f commits/s, cpu %.0f%%",
				conc, round,
				d.txps, d.p99, micros(d.cpuPerTx),
				r.txps, r.p99, micros(r.cpuPerTx), 100*r.txps/d.txps,
				l.txps, l.p99, micros(l.cpuPerTx), 100*l.txps/d.txps,
				l.commitsPerTx, l.commitsPerTx*l.txps, l.cpu)
		}
		if len(ratios) > 1 {
			slices.Sort(ratios)
			b.Logf("concurrency %2d: ledger/direct over %d rounds: median %.0f%% (min %.0f%%, max %.0f%%)",
				conc, len(ratios), median(ratios), ratios[0], ratios[len(ratios)-1])
		}
		if pr := pgRatios[conc]; len(pr) > 1 {
			slices.Sort(pr)
			b.Logf("concurrency %2d: postgres/sqlite ledger over %d rounds: median %.0f%% (min %.0f%%, max %.0f%%)",
				conc, len(pr), median(pr), pr[0], pr[len(pr)-1])
		}
	}
}

// runLedgerLeg runs one leg of BenchmarkLedgerRelay: b.N transfers at
// concurrency conc, straight to a fresh core (direct) or through a relay
// without (relay) or with (ledger) a fresh ledger file.
func runLedgerLeg(b *testing.B, mode string, conc int, nextGUID func() uint64) benchResult {
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
	case "pgledger":
		return runPGLeg(b, conc, core, client, nextGUID)
	}
	var commits0 uint64
	if led != nil {
		commits0 = led.Commits()
	}
	cpu0, wall0 := processCPU()+core.cpu(), time.Now()
	r := runLoad(b, conc, workers)
	cpu, wall := processCPU()+core.cpu()-cpu0, time.Since(wall0)
	r.cpuPerTx = cpu / time.Duration(b.N)
	r.cpu = 100 * cpu.Seconds() / (wall.Seconds() * float64(runtime.NumCPU()))
	b.ReportMetric(micros(r.cpuPerTx), "cpu-µs/tx")
	b.ReportMetric(r.cpu, "cpu-%")
	if led != nil {
		r.commitsPerTx = float64(led.Commits()-commits0) / float64(b.N)
		b.ReportMetric(r.commitsPerTx, "commits/tx")
	}
	return r
}

// runPGLeg is the ledger leg on a PostgreSQL ledger (a fresh schema on
// the throwaway server, sharing the machine's CPUs): commits/tx is the
// server's WAL flushes per transfer (2 would mean no grouping), writes/tx
// its write transactions per transfer (a claim and an outcome: 2), and
// db-cpu-µs/tx the server's CPU time per transfer, also included in
// cpu-µs/tx.
func runPGLeg(b *testing.B, conc int, core benchCoreHandle, client *corecall.Client, nextGUID func() uint64) benchResult {
	pg := newPGServer(b)
	before := pg.sample()
	led := openBenchPG(b)
	workers := relayWorkers(b, startBenchRelay(b, client, conc, led), nextGUID)
	cpu0, wall0 := processCPU()+core.cpu(), time.Now()
	r := runLoad(b, conc, workers)
	wall := time.Since(wall0)
	b.StopTimer()
	writes := led.Commits()
	led.Close() // waits for the outcomes on their way; the relay is idle

	after := pg.sample()
	dbCPU := after.cpu - before.cpu
	cpu := processCPU() + core.cpu() - cpu0 + dbCPU
	r.cpuPerTx = cpu / time.Duration(b.N)
	r.dbCPUPerTx = dbCPU / time.Duration(b.N)
	r.cpu = 100 * cpu.Seconds() / (wall.Seconds() * float64(runtime.NumCPU()))
	r.commitsPerTx = float64(after.walSyncs-before.walSyncs) / float64(b.N)
	r.writesPerTx = float64(writes) / float64(b.N)
	b.ReportMetric(micros(r.cpuPerTx), "cpu-µs/tx")
	b.ReportMetric(micros(r.dbCPUPerTx), "db-cpu-µs/tx")
	b.ReportMetric(r.cpu, "cpu-%")
	b.ReportMetric(r.commitsPerTx, "commits/tx")
	b.ReportMetric(r.writesPerTx, "writes/tx")
	return r
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// median of sorted values.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
