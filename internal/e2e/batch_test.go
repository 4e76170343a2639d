package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/channel"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/testkit"
)

// resolve and reprocess at the scale of an outage: thousands of rows left
// by a relay whose core was down, handled many at a time by the real
// binaries against a real core, on both stores.

// failedRows sends n transfers through a relay whose core is down, as an
// outage does: each is answered E902 and leaves its row FAILED/E902. The
// relay is stopped before it returns.
func failedRows(t testing.TB, relayBin, db string, n int) {
	t.Helper()
	down := startProc(t, "relay", relayBin, "relay listening on ", "--port", "0", "--core", testkit.ClosedURL(t), "--db", db, "--breaker-failures", "0")
	sum, err := channel.RunLoad(context.Background(), channel.LoadConfig{
		Addr: down.addr, Count: n, Concurrency: 32,
		// From the account with the most money, so that thousands of
		// them post.
		Fields: map[string]string{"wdAcct": "11002003004007", "dpAcct": "11002003004005", "amount": "100", "memo": "outage"},
	})
	assert.NilError(t, err)
	assert.Equal(t, sum.GUIDs[generated.RspConnectFail], n, "%+v", sum.Codes)
	down.signal(t, syscall.SIGTERM)
	assert.Equal(t, down.wait(t, 20*time.Second), 0)
}

// batchRun is one run of a batch binary.
type batchRun struct {
	code    int
	out     string         // the summary line
	counts  map[string]int // its counts, by outcome
	stderr  string
	elapsed time.Duration // from start to exit
	maxRSS  int64         // peak resident set (VmHWM), in KiB, read every 20 ms
	cpu     time.Duration // the processor time it used, user and system
}

// runBatch runs the batch binary name with args and waits (up to ten
// minutes) for it to end.
func runBatch(t testing.TB, name string, args ...string) batchRun {
	t.Helper()
	return runBatchBin(t, binPath(t, name), args...)
}

// runBatchBin is runBatch of the binary at bin.
func runBatchBin(t testing.TB, bin string, args ...string) batchRun {
	t.Helper()
	name := filepath.Base(bin)
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	assert.NilError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// The peak resident set, from /proc while it runs: the rusage of a
	// child counts the memory of the test process it was forked from.
	hwm := make(chan int64, 1)
	go func() {
		var peak int64
		path := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			b, err := os.ReadFile(path)
			if err != nil {
				hwm <- peak
				return
			}
			if m := regexp.MustCompile(`VmHWM:\s+(\d+) kB`).FindSubmatch(b); m != nil {
				n, _ := strconv.ParseInt(string(m[1]), 10, 64)
				peak = max(peak, n)
			}
			<-tick.C
		}
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("%s still running after 10 minutes\n%s", name, stderr.String())
	}
	r := batchRun{out: string(bytes.TrimSpace(stdout.Bytes())), stderr: stderr.String(), counts: map[string]int{}, elapsed: time.Since(start)}
	r.maxRSS = <-hwm
	if ps := cmd.ProcessState; ps != nil {
		r.cpu = ps.UserTime() + ps.SystemTime()
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", name, err)
	}
	for _, m := range regexp.MustCompile(`(\w+)=(\d+)`).FindAllStringSubmatch(r.out, -1) {
		n, _ := strconv.Atoi(m[2])
		r.counts[m[1]] += n
	}
	t.Logf("%s %v: exit %d: %s", name, args, r.code, r.out)
	return r
}

// stateCounts reads the ledger's rows by state.
func stateCounts(t testing.TB, db string) map[ledger.State]int64 {
	t.Helper()
	l, err := ledger.OpenExisting(db)
	assert.NilError(t, err)
	defer l.Close()
	st, err := l.Stats(context.Background())
	assert.NilError(t, err)
	return st.ByState
}

// postedOnceEach checks that the core received exactly n POSTs, one per
// GUID.
func postedOnceEach(t testing.TB, coreURL string, n int) {
	t.Helper()
	st, err := coreStats(coreURL)
	assert.NilError(t, err)
	assert.Equal(t, st.Calls, n)
	assert.Equal(t, len(st.ByGUID), n)
	for g, c := range st.ByGUID {
		assert.Equal(t, c, 1, "GUID %s posted %d times", g, c)
	}
}

// TestBatchLargeSelection: reprocess sends every row of a large outage's
// selection once (the core's own count: one POST per GUID), and resolve
// settles a large selection of unknowns, each by its lookup, posting
// nothing.
func TestBatchLargeSelection(t *testing.T) {
	relayBin, coresimBin := binaries(t)
	testkit.EachStore(t, func(t *testing.T, db string) {
		const n = 3000
		failedRows(t, relayBin, db, n)
		_, coreURL := startCore(t, coresimBin, "0")

		r := runBatch(t, "reprocess", "--db", db, "--core", coreURL, "--max-attempts", "3")
		assert.Equal(t, r.code, 0, r.stderr)
		assert.Equal(t, r.counts["selected"], n)
		assert.Equal(t, r.counts["0000"], n)
		postedOnceEach(t, coreURL, n)
		st := stateCounts(t, db)
		assert.Equal(t, st[ledger.StateDone], int64(n))
		assert.Equal(t, st[ledger.StateSent], int64(0))

		// The same rows as unknowns (the core posted them all), and as
		// many never posted: resolve settles each once, by GET alone.
		failedRows(t, relayBin, db, n)
		raw := testkit.OpenRaw(t, db, ledger.IsURL(db))
		raw.Exec(`UPDATE tx SET state = 'UNKNOWN', rsp_code = 'E901'`)
		r = runBatch(t, "resolve", "--db", db, "--core", coreURL, "--min-age", "0")
		assert.Equal(t, r.code, 0, r.stderr)
		assert.Equal(t, r.counts["selected"], 2*n)
		assert.Equal(t, r.counts["done"], n)
		assert.Equal(t, r.counts["failed"], n)
		postedOnceEach(t, coreURL, n) // resolve posted nothing
		st = stateCounts(t, db)
		assert.Equal(t, st[ledger.StateDone], int64(n))
		assert.Equal(t, st[ledger.StateFailed], int64(n))
		assert.Equal(t, st[ledger.StateUnknown], int64(0))
	})
}

// killCoreMidway runs the batch command name with args over a selection
// of n rows, kills core once reached says the run is well under way, and
// returns the run, checked to have stopped as SPEC 7 says: exit 1, the
// rows it did not begin counted not_tried. --rate keeps the run going long
// enough to kill the core midway on any machine.
func killCoreMidway(t *testing.T, core *proc, n int, what string, reached func() (bool, error), name string, args ...string) batchRun {
	t.Helper()
	ran := make(chan batchRun, 1)
	go func() { ran <- runBatch(t, name, append(args, "--rate", "1000")...) }()
	poll(t, 30*time.Second, what, reached)
	core.signal(t, syscall.SIGKILL)
	var r batchRun
	select {
	case r = <-ran:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s did not end", name)
	}
	assert.Equal(t, r.code, 1, r.stderr)
	assert.Assert(t, r.counts["not_tried"] > 0, r.out)
	assert.Equal(t, r.counts["selected"]+r.counts["not_tried"], n, r.out)
	return r
}

// TestReprocessCoreKilledMidway: the core dies while reprocess has rows in
// flight. The run stops admitting rows, lets those in flight finish by the
// rules of one row, exits 1 and counts the rest not tried: no row is left
// SENT or lost, each not tried is untouched, and the next run, against a
// core that is back, sends exactly those that are still FAILED/E902.
func TestReprocessCoreKilledMidway(t *testing.T) {
	relayBin, coresimBin := binaries(t)
	testkit.EachStore(t, func(t *testing.T, db string) {
		const n = 3000
		failedRows(t, relayBin, db, n)
		core, coreURL := startCore(t, coresimBin, "0")

		r := killCoreMidway(t, core, n, "reprocess to have sent 500 rows", func() (bool, error) {
			st, err := coreStats(coreURL)
			return err == nil && st.Calls >= 500, err
		}, "reprocess", "--db", db, "--core", coreURL, "--max-attempts", "5")

		st := stateCounts(t, db)
		assert.Equal(t, st[ledger.StateSent], int64(0), "no row left SENT")
		assert.Equal(t, st[ledger.StateDone]+st[ledger.StateUnknown]+st[ledger.StateFailed], int64(n), "no row lost")
		raw := testkit.OpenRaw(t, db, ledger.IsURL(db))
		var untouched, spent int
		assert.NilError(t, raw.QueryRow(`SELECT COUNT(*) FROM tx WHERE state = 'FAILED' AND rsp_code = 'E902' AND attempts = 1`, nil, &untouched))
		assert.NilError(t, raw.QueryRow(`SELECT COUNT(*) FROM tx WHERE state = 'FAILED' AND rsp_code = 'E902' AND attempts = 2`, nil, &spent))
		// Untouched: the rows not tried, and those whose lookup the core
		// no longer answered (unchanged, no attempt spent).
		assert.Equal(t, untouched, r.counts["not_tried"]+r.counts["unreachable"], "the rows not tried are untouched")
		assert.Equal(t, spent, r.counts["E902"], "a send that could not connect spent its attempt")
		assert.Equal(t, int64(untouched+spent), st[ledger.StateFailed])
		assert.Equal(t, int64(r.counts["E901"]), st[ledger.StateUnknown], "a send cut off after connecting is unknown")

		// The core is back (a fresh one, which knows none of the
		// earlier postings): the next run sends the FAILED rows, and
		// only those.
		_, coreURL = startCore(t, coresimBin, "0")
		r = runBatch(t, "reprocess", "--db", db, "--core", coreURL, "--max-attempts", "5")
		assert.Equal(t, r.code, 0, r.stderr)
		assert.Equal(t, r.counts["0000"], untouched+spent)
		postedOnceEach(t, coreURL, untouched+spent)
		st = stateCounts(t, db)
		assert.Equal(t, st[ledger.StateFailed], int64(0))
		assert.Equal(t, st[ledger.StateSent], int64(0))
	})
}

// TestResolveCoreKilledMidway: resolve stops as reprocess does when the
// core dies under it: it begins no new lookup, exits 1 and counts the rest
// not tried; every row it did not settle is as it was, and the next run,
// against a core that is back, settles exactly those.
func TestResolveCoreKilledMidway(t *testing.T) {
	relayBin, coresimBin := binaries(t)
	testkit.EachStore(t, func(t *testing.T, db string) {
		const n = 3000
		failedRows(t, relayBin, db, n)
		raw := testkit.OpenRaw(t, db, ledger.IsURL(db))
		raw.Exec(`UPDATE tx SET state = 'UNKNOWN', rsp_code = 'E901'`)
		core, coreURL := startCore(t, coresimBin, "0")

		r := killCoreMidway(t, core, n, "resolve to have settled 500 rows", func() (bool, error) {
			return stateCounts(t, db)[ledger.StateFailed] >= 500, nil
		}, "resolve", "--db", db, "--core", coreURL, "--min-age", "0")
		assert.Equal(t, r.counts["selected"], r.counts["failed"]+r.counts["unreachable"], r.out)

		st := stateCounts(t, db)
		assert.Equal(t, st[ledger.StateFailed], int64(r.counts["failed"]), "each lookup answered 404 settled its row")
		assert.Equal(t, st[ledger.StateUnknown], int64(r.counts["unreachable"]+r.counts["not_tried"]), "the rest are as they were")
		assert.Equal(t, st[ledger.StateSent]+st[ledger.StateDone], int64(0))

		_, coreURL = startCore(t, coresimBin, "0")
		r = runBatch(t, "resolve", "--db", db, "--core", coreURL, "--min-age", "0")
		assert.Equal(t, r.code, 0, r.stderr)
		assert.Equal(t, r.counts["failed"], int(st[ledger.StateUnknown]))
		st = stateCounts(t, db)
		assert.Equal(t, st[ledger.StateFailed], int64(n))
		cs, err := coreStats(coreURL)
		assert.NilError(t, err)
		assert.Equal(t, cs.Calls, 0, "resolve never posts")
	})
}

// TestTwoReprocessRunsOverTenThousandRows: two reprocess processes at once
// over the same 10,000 FAILED rows of one PostgreSQL ledger (two hosts'
// timers) send each row once: the conditional re-claim decides which run
// sends it, and the other counts it skipped.
func TestTwoReprocessRunsOverTenThousandRows(t *testing.T) {
	relayBin, coresimBin := binaries(t)
	db := pgtest.URL(t)
	const n = 10000
	failedRows(t, relayBin, db, n)
	_, coreURL := startCore(t, coresimBin, "0")

	runs := make(chan batchRun, 2)
	start := make(chan struct{})
	for range 2 {
		go func() {
			<-start
			runs <- runBatch(t, "reprocess", "--db", db, "--core", coreURL, "--max-attempts", "3")
		}()
	}
	close(start)
	sent, skipped := 0, 0
	for range 2 {
		r := <-runs
		assert.Equal(t, r.code, 0, r.stderr)
		sent += r.counts["0000"]
		skipped += r.counts["skipped"]
	}
	assert.Equal(t, sent, n, "each row sent by exactly one run")
	postedOnceEach(t, coreURL, n)
	st := stateCounts(t, db)
	assert.Equal(t, st[ledger.StateDone], int64(n))
	t.Logf("sent %d, skipped %d (the rows each run found the other had taken)", sent, skipped)
}

// TestReprocessRate: --rate is honoured within 10 %, measured by the
// database's clock: the span between the first and the last re-claim the
// run wrote into the ledger's history.
func TestReprocessRate(t *testing.T) {
	relayBin, coresimBin := binaries(t)
	testkit.EachStore(t, func(t *testing.T, db string) {
		const n, rate = 600, 200.0
		failedRows(t, relayBin, db, n)
		_, coreURL := startCore(t, coresimBin, "0")
		r := runBatch(t, "reprocess", "--db", db, "--core", coreURL, "--max-attempts", "3", "--rate", strconv.Itoa(int(rate)))
		assert.Equal(t, r.code, 0, r.stderr)
		assert.Equal(t, r.counts["0000"], n)

		raw := testkit.OpenRaw(t, db, ledger.IsURL(db))
		span := `(julianday(MAX(at)) - julianday(MIN(at))) * 86400.0`
		if raw.Postgres() {
			span = `EXTRACT(EPOCH FROM MAX(at) - MIN(at))::float8`
		}
		var seconds float64
		var reclaims int
		assert.NilError(t, raw.QueryRow(`SELECT `+span+`, COUNT(*) FROM history WHERE command = 'reprocess' AND state_after = 'SENT'`, nil, &seconds, &reclaims))
		assert.Equal(t, reclaims, n)
		got := float64(n-1) / seconds
		t.Logf("%d re-claims over %.3f s: %.1f rows/s (--rate %v)", n, seconds, got, rate)
		assert.Assert(t, got > rate*0.9 && got < rate*1.1, "%.1f rows/s for --rate %v", got, rate)
	})
}
