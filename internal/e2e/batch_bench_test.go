package e2e

import (
	"flag"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"lhrelay/internal/ledger"
	"lhrelay/internal/testkit"
)

var (
	batchOld = flag.String("batch-old", "",
		"`dir` holding resolve and reprocess binaries of another tree (e.g. main's), measured beside this tree's in BenchmarkBatchOutage")
	batchRows    = flag.Int("batch-rows", 5000, "rows of each BenchmarkBatchOutage run")
	batchRSSRows = flag.Int("batch-rss-rows", 100000, "FAILED rows of BenchmarkBatchOutage's memory run (0: skip it)")
	batchArgs    = flag.String("batch-args", "", "more flags for this tree's resolve and reprocess in BenchmarkBatchOutage, space-separated (e.g. --max-inflight 32)")
	batchOnly    = flag.String("batch-only", "", "run only BenchmarkBatchOutage's legs whose name contains this")
)

// BenchmarkBatchOutage measures resolve and reprocess after an outage, as
// an operator meets them: -batch-rows transfers sent to a relay whose core
// is down (FAILED/E902), then, against coresim, `reprocess --max-attempts
// 3` and, with every row made UNKNOWN/E901 (the core posted them all),
// `resolve --min-age 0`. Rows a second are the selection over the
// process's whole run, start-up included. Each store; this tree's binaries
// and, with -batch-old, another tree's, one after the other in the same
// run. Then this tree's reprocess against `coresim --max-concurrent 4`
// (E901 it caused: none wanted), and over -batch-rss-rows FAILED rows
// (peak RSS):
//
//	go test -run '^$' -bench BatchOutage -benchtime 1x -v ./internal/e2e/ -args -batch-old /tmp/old/bin
func BenchmarkBatchOutage(b *testing.B) {
	run := func(name string, f func(b *testing.B)) {
		if strings.Contains(name, *batchOnly) {
			b.Run(name, f)
		}
	}
	relayBin, coresimBin := binaries(b)
	type impl struct {
		name, dir string
		args      []string
	}
	impls := []impl{{"this", filepath.Dir(binPath(b, "reprocess")), strings.Fields(*batchArgs)}}
	if *batchOld != "" {
		impls = append(impls, impl{"old", *batchOld, nil})
	}
	n := *batchRows
	for range b.N {
		for _, s := range testkit.Stores {
			for _, im := range impls {
				run(s.Name+"/"+im.name, func(b *testing.B) {
					db := s.New(b)
					failedRows(b, relayBin, db, n)
					_, coreURL := startCore(b, coresimBin, "0")
					r := runBatchBin(b, filepath.Join(im.dir, "reprocess"), append([]string{"--db", db, "--core", coreURL, "--max-attempts", "3"}, im.args...)...)
					if r.code != 0 || r.counts["0000"] != n {
						b.Fatalf("reprocess: exit %d: %s\n%s", r.code, r.out, r.stderr)
					}
					reprocessRate := float64(n) / r.elapsed.Seconds()
					raw := testkit.OpenRaw(b, db, ledger.IsURL(db))
					raw.Exec(`UPDATE tx SET state = 'UNKNOWN', rsp_code = 'E901'`)
					r2 := runBatchBin(b, filepath.Join(im.dir, "resolve"), append([]string{"--db", db, "--core", coreURL, "--min-age", "0"}, im.args...)...)
					if r2.code != 0 || r2.counts["done"] != n {
						b.Fatalf("resolve: exit %d: %s\n%s", r2.code, r2.out, r2.stderr)
					}
					resolveRate := float64(n) / r2.elapsed.Seconds()
					b.ReportMetric(reprocessRate, "reprocess-rows/s")
					b.ReportMetric(resolveRate, "resolve-rows/s")
					b.Logf("%s %s, %d rows: reprocess %.0f rows/s (%v, CPU %v, peak RSS %d KiB), resolve %.0f rows/s (%v, CPU %v, peak RSS %d KiB)",
						s.Name, im.name, n, reprocessRate, r.elapsed.Round(time.Millisecond), r.cpu.Round(time.Millisecond), r.maxRSS,
						resolveRate, r2.elapsed.Round(time.Millisecond), r2.cpu.Round(time.Millisecond), r2.maxRSS)
				})
			}
		}
		for _, im := range impls {
			run("max-concurrent-4/"+im.name, func(b *testing.B) {
				db := filepath.Join(b.TempDir(), "relay.db")
				failedRows(b, relayBin, db, n)
				core := startProc(b, "coresim", coresimBin, "coresim listening on ", "--port", "0", "--max-concurrent", "4")
				r := runBatchBin(b, filepath.Join(im.dir, "reprocess"), append([]string{"--db", db, "--core", core.addr, "--max-attempts", "3"}, im.args...)...)
				b.ReportMetric(float64(r.counts["E901"]), "E901")
				b.Logf("%s: coresim --max-concurrent 4, %d rows: exit %d, %s (%.0f rows/s)", im.name, n, r.code, r.out, float64(n)/r.elapsed.Seconds())
			})
		}
		if m := *batchRSSRows; m > 0 {
			for _, s := range testkit.Stores {
				run("rss/"+s.Name+"/"+strconv.Itoa(m), func(b *testing.B) {
					db := s.New(b)
					failedRows(b, relayBin, db, m)
					_, coreURL := startCore(b, coresimBin, "0")
					r := runBatch(b, "reprocess", append([]string{"--db", db, "--core", coreURL, "--max-attempts", "3"}, strings.Fields(*batchArgs)...)...)
					if r.code != 0 || r.counts["0000"] != r.counts["selected"] || r.counts["selected"] < m*99/100 {
						b.Fatalf("reprocess: exit %d: %s\n%s", r.code, r.out, r.stderr)
					}
					b.ReportMetric(float64(r.maxRSS)/1024, "peak-RSS-MiB")
					b.Logf("%s: reprocess of %d FAILED rows: %.0f rows/s, peak RSS %.1f MiB", s.Name, m, float64(m)/r.elapsed.Seconds(), float64(r.maxRSS)/1024)
				})
			}
		}
	}
}
