package verify

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"lhrelay/internal/ledger"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/plant"
)

// Result is what one schedule produced.
type Result struct {
	Schedule   Schedule
	Attempts   int
	GUIDs      int
	Posted     int
	Faults     map[string]int
	Violations []Violation
	RunErrs    []string // the runner's own failures: the schedule is not valid
	Elapsed    time.Duration
	// MissedWindows: early-settled GUIDs whose relay gave up before the
	// core's late 200 (history.missedWindow), exempt from two checks.
	MissedWindows int
	// Phases is the wall time of each phase of the run, in order: where
	// a schedule's time goes.
	Phases []Phase
}

// Phase is the wall time one phase of a schedule took.
type Phase struct {
	Name string
	D    time.Duration
}

// OK reports whether the schedule ran and its history checks.
func (r Result) OK() bool { return len(r.Violations) == 0 && len(r.RunErrs) == 0 }

// NewSchedule draws schedule index of seed for cfg.
func (cfg *Config) NewSchedule(seed uint64, index int, store string) Schedule {
	return newSchedule(seed, index, store, cfg.Relays, cfg.Duration, cfg.params())
}

// params are the settings cfg's schedules are drawn and run against; read
// from cfg each time, so that configs run at once share nothing.
func (cfg *Config) params() params {
	p := defaultParams
	if cfg.Rate > 0 {
		p.rate = cfg.Rate
	}
	if cfg.Plant == plant.ForgetLate200 {
		p.earlyAll = true
		// The early settle is a resolve process started once the core
		// holds the call, and it must change the row before the core's
		// late 200 (slow) and that 200 reach the relay within its
		// timeout. On a loaded 2-core host, four schedules at once, the
		// process takes 0.3 to 0.9 s from start to exit, so 850 ms
		// within a 1 s timeout catches the plant in some schedules
		// only; these windows hold it in every one. The timeout stays
		// below staleSent less the 5 s the relay requires beside it;
		// the core's longest delay grows with it and stays shorter than
		// the settling ages (minAge, staleSent) plus the timeout, as
		// checkLookups needs.
		p.timeout, p.slow, p.maxDelay = 1900*time.Millisecond, 1550*time.Millisecond, 3*time.Second
	}
	return p
}

// Run runs one schedule against fresh processes and checks its history.
func (cfg *Config) Run(ctx context.Context, s Schedule) (res Result) {
	start := time.Now()
	res = Result{Schedule: s}
	defer func() { res.Elapsed = time.Since(start) }()
	dir := filepath.Join(cfg.Out, fmt.Sprintf("%s-%d-%04d", s.Store, s.Seed, s.Index))
	// A schedule run again starts from nothing: an old ledger or truth log
	// would mix two runs' histories.
	if err := os.RemoveAll(dir); err != nil {
		res.RunErrs = append(res.RunErrs, err.Error())
		return res
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		res.RunErrs = append(res.RunErrs, err.Error())
		return res
	}
	logf, err := os.Create(filepath.Join(dir, "run.log"))
	if err != nil {
		res.RunErrs = append(res.RunErrs, err.Error())
		return res
	}
	defer logf.Close()
	last := time.Now()
	phase := func(name string) {
		now := time.Now()
		res.Phases = append(res.Phases, Phase{name, now.Sub(last)})
		fmt.Fprintf(logf, "verify: phase %s took %v\n", name, now.Sub(last).Round(time.Millisecond))
		last = now
	}
	w := &world{cfg: cfg, s: s, dir: dir, logf: logf, applied: map[string]int{}, dbFaulted: s.faultsDatabase(),
		httpc: &http.Client{Timeout: 10 * time.Second}}
	defer w.httpc.CloseIdleConnections()
	fail := func(err error) Result {
		res.RunErrs = append(res.RunErrs, err.Error())
		return res
	}

	switch s.Store {
	case StorePostgres:
		if s.Failover {
			// A pair of the schedule's own: the failover leaves it
			// with a dead primary. The relays and batch commands reach
			// whichever server takes writes through the multi-host URL.
			var cleanups pgtest.Cleanups
			defer cleanups.Run()
			if w.pair, err = pgtest.StartPair(&cleanups, true, pgtest.Options{}); err != nil {
				return fail(err)
			}
			w.db = w.pair.URL()
			break
		}
		w.pg = cfg.PG
		if s.ClockShift != 0 {
			if w.pg, err = cfg.clockServer(s.ClockShift); err != nil {
				return fail(err)
			}
			w.applied[fmt.Sprintf("postgres-clock%+dm", int(s.ClockShift.Minutes()))]++
		}
		if w.pg == nil {
			return fail(fmt.Errorf("no PostgreSQL server"))
		}
		// Named by plant too: one run may run a schedule under each
		// plant on the same server.
		schema := fmt.Sprintf("verify_%d_%d", s.Seed, s.Index)
		if cfg.Plant != "" {
			schema += "_" + strings.ReplaceAll(string(cfg.Plant), "-", "_")
		}
		direct, err := w.pg.Schema(ctx, schema)
		if err != nil {
			return fail(err)
		}
		if w.db, err = w.throughProxy(direct); err != nil {
			return fail(err)
		}
		defer w.proxy.Close()
	default:
		w.db = filepath.Join(dir, "ledger.db")
	}
	phase("store")
	if err := w.startCore(); err != nil {
		return fail(err)
	}
	phase("core")
	defer func() {
		if err := w.core.term(15 * time.Second); err != nil {
			w.runErr("%v", err)
		}
		res.RunErrs = append(res.RunErrs, w.runErrs...)
	}()
	for i := range s.Relays {
		r := &relay{w: w, i: i}
		w.relays = append(w.relays, r)
		if err := r.start(); err != nil {
			return fail(err)
		}
	}
	stopRelays := func() {
		for _, r := range w.relays {
			if err := r.stop(); err != nil {
				w.runErr("%v", err)
			}
		}
	}
	defer stopRelays()
	phase("relays")

	tx, err := postingTx()
	if err != nil {
		return fail(err)
	}
	var (
		mu       sync.Mutex
		attempts []Attempt
	)
	record := func(a Attempt) {
		mu.Lock()
		attempts = append(attempts, a)
		mu.Unlock()
	}

	// The traffic and the faults, each at its offset.
	t0 := time.Now()
	var wg sync.WaitGroup
	at := func(d time.Duration, fn func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTimer(time.Until(t0.Add(d)))
			defer t.Stop()
			select {
			case <-t.C:
				fn()
			case <-ctx.Done():
			}
		}()
	}
	for _, b := range s.Txs {
		at(b.Start, func() { w.business(ctx, tx, b, record) })
	}
	kinds := map[string]faultKind{}
	for _, k := range faultKinds {
		kinds[k.name] = k
	}
	for _, e := range s.Events {
		if s.EarlySettle && kinds[e.Kind].resends {
			continue // after quiesce only, in the settling phase
		}
		at(e.At, func() {
			if err := kinds[e.Kind].apply(ctx, w, e); err != nil {
				w.runErr("fault %s at %v: %v", e.Kind, e.At, err)
			}
			w.mu.Lock()
			w.applied[e.Kind]++
			w.mu.Unlock()
		})
	}
	wg.Wait()
	phase("traffic")

	// Quiesce, then settle.
	if err := w.control(ctx, "/disarm", nil); err != nil {
		return fail(err)
	}
	if w.proxy != nil {
		w.proxy.CutAfterCommits(0)
	}
	if err := w.quiesceCore(ctx, cfg.params().maxDelay+30*time.Second); err != nil {
		return fail(err)
	}
	phase("quiesce")
	if err := w.unknownTail(ctx, tx, record); err != nil {
		return fail(err)
	}
	phase("tail")
	stopRelays()
	phase("stop")
	if err := w.settle(ctx); err != nil {
		return fail(err)
	}
	phase("settle")

	// The history of every row (SPEC 6b) must verify: ledger audit
	// checks every chain and exits 1 naming the first entry that does not.
	if err := w.audit(ctx); err != nil {
		w.runErr("%v", err)
	}
	phase("audit")
	rows, err := readRows(ctx, w.db)
	if err != nil {
		return fail(err)
	}
	truth, err := readTruth(filepath.Join(dir, "truth.jsonl"))
	if err != nil {
		return fail(err)
	}
	guids := make([]string, 0, len(s.Txs)+len(s.Tail))
	for _, b := range slices.Concat(s.Txs, s.Tail) {
		guids = append(guids, b.GUID)
	}
	entries, err := readHistories(ctx, w.db, guids)
	if err != nil {
		return fail(err)
	}
	phase("read")
	kills := map[int][]time.Time{}
	for _, k := range w.kills {
		kills[k.relay] = append(kills[k.relay], k.at)
	}
	h := history{tx: tx, attempts: attempts, truth: truth, rows: rows, reprocess: w.reprocess, entries: entries, early: w.earlyGUIDs, timeout: cfg.params().timeout,
		kills: kills}
	res.Violations = h.check()
	phase("check")
	res.Attempts = len(attempts)
	res.GUIDs = len(s.Txs)
	res.Posted = h.postedGUIDs()
	res.MissedWindows = h.missedWindows()
	res.Faults = w.applied
	if err := panicked(filepath.Join(dir, "run.log")); err != nil {
		w.runErr("%v", err)
	}
	if err := h.write(dir, s, res.Violations); err != nil {
		w.runErr("writing the history: %v", err)
	}
	phase("write")
	return res
}

// settle runs the settling phase on the quiesced ledger: one resolve pass
// whose lookups the core answers about another GUID, one reprocess run, then
// resolve until nothing is left to settle.
func (w *world) settle(ctx context.Context) error {
	if err := w.control(ctx, "/arm", map[string][]string{"fault": {"lookup-other-guid"}, "n": {"1000000"}}); err != nil {
		return err
	}
	if err := w.batch(ctx, true, "resolve", "--min-age", "0", "--stale-sent", "0.001"); err != nil {
		return err
	}
	if err := w.control(ctx, "/disarm", nil); err != nil {
		return err
	}
	// A bound above any row's attempts here (channels send at most 6
	// times, reprocess runs add a few): every row reprocess selects is
	// offered, so one it must not resend is not hidden by its count.
	if err := w.batch(ctx, true, "reprocess", "--max-attempts", "32"); err != nil {
		return err
	}
	for pass := 0; ; pass++ {
		if err := w.batch(ctx, true, "resolve", "--min-age", "0", "--stale-sent", "0.001"); err != nil {
			return err
		}
		rows, err := readRows(ctx, w.db)
		if err != nil {
			return err
		}
		open := 0
		for _, r := range rows {
			if r.State == ledger.StateSent || r.State == ledger.StateUnknown || r.State == ledger.StateReceived {
				open++
			}
		}
		if open == 0 || pass == 4 {
			return nil // rows still open are the checker's to report
		}
	}
}

// readRows reads every row of the ledger.
func readRows(ctx context.Context, db string) (map[string]ledger.Row, error) {
	l, err := ledger.OpenExisting(db)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	rows := map[string]ledger.Row{}
	err = l.Scan(ctx, ledger.Filter{}, func(r ledger.Row) error {
		rows[r.GUID] = r
		return nil
	})
	return rows, err
}

// readHistories reads each GUID's history (SPEC 6b) from the ledger.
func readHistories(ctx context.Context, db string, guids []string) (map[string][]ledger.Entry, error) {
	l, err := ledger.OpenExisting(db)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	hs := make(map[string][]ledger.Entry, len(guids))
	for _, g := range guids {
		if hs[g], err = l.History(ctx, g); err != nil {
			return nil, err
		}
	}
	return hs, nil
}

// panicked reports a panic in any process's output: none may reach a
// channel, and none may go unnoticed because the history happens to check.
func panicked(log string) error {
	b, err := os.ReadFile(log)
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "panic: ") || strings.Contains(l, "panic serving") {
			return fmt.Errorf("a process panicked: %s", l)
		}
	}
	return nil
}
