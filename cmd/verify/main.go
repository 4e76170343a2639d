// Command verify runs seeded fault schedules against real relays and checks
// every history against the core's ground truth (package internal/verify
// says what a schedule is and which model the checker holds it to):
//
//	go run ./cmd/verify [--schedules N] [--seed S] [--first I] [--store sqlite|postgres|both]
//	                    [--relays K] [--duration D] [--rate R] [--parallel P] [--out DIR] [--plant NAME]
//
// It builds the relay, coresim, resolve, reprocess, purge and ledger from this tree
// (run it from the repository) into a temporary directory, then runs
// schedules I … I+N-1 of seed S, each on fresh processes, on each store
// asked for. It prints one line per schedule and a summary, writes every
// history into --out, and exits 0 only when every schedule ran and its
// history checks.
//
// --parallel P runs P schedules at once, each on processes, ports, files
// and (on PostgreSQL) a server of its own: a schedule spends most of its
// wall time waiting (on timeouts, retries' backoffs, the settling
// passes), which another schedule's work fills. The lines still come in
// schedule order.
//
// --plant NAME builds the commands with -tags verifybugs and switches on one
// planted mistake (internal/plant): the run then counts the schedules whose
// history the checker rejects, and exits 0 only when it rejects at least
// 99 % of them. --plant A,B or --plant all runs the schedules under each
// plant in turn, on one build and one set of servers, with the histories
// of each in a directory of --out named by the plant, and exits 0 only
// when every plant is caught so.
//
// Exit status: 0 as above, 1 when a schedule fails (or a plant goes
// unnoticed), 2 for bad arguments or when the commands cannot be built.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"lhrelay/internal/app"
	"lhrelay/internal/cliflag"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/plant"
	"lhrelay/internal/verify"
)

func main() { app.Main(run) }

type options struct {
	schedules int
	seed      uint64
	first     int
	stores    []string
	relays    int
	duration  time.Duration
	rate      float64
	parallel  int
	list      bool // --list-plants
	out       string
	plants    []plant.Name // none: a clean run
}

const usageText = `usage: verify [--schedules N] [--seed S] [--first I] [--store sqlite|postgres|both] [--relays K] [--duration D] [--rate R] [--parallel P] [--out DIR] [--plant NAME]

Runs seeded fault schedules against real relays and checks every history.

`

func parseArgs(args []string, usage io.Writer) (options, error) {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o options
	store := fs.String("store", "sqlite", "ledger `store`: sqlite, postgres or both")
	plantName := fs.String("plant", "", "planted mistake `NAME` to switch on ("+names()+"), several separated by commas, or all")
	fs.BoolVar(&o.list, "list-plants", false, "print the names of the planted mistakes, one a line, and exit")
	fs.IntVar(&o.schedules, "schedules", 20, "`number` of schedules per store")
	fs.Uint64Var(&o.seed, "seed", 1, "`seed` the schedules are drawn from")
	fs.IntVar(&o.first, "first", 0, "`index` of the first schedule (to re-run one)")
	fs.IntVar(&o.relays, "relays", 2, "`number` of relays on the one ledger")
	fs.Float64Var(&o.rate, "rate", 300, "business transactions a `second` the channels start")
	fs.IntVar(&o.parallel, "parallel", defaultParallel, "`number` of schedules run at once")
	cliflag.SecondsVar(fs, &o.duration, "duration", 2*time.Second, "`seconds` of traffic and faults per schedule")
	fs.StringVar(&o.out, "out", "", "`directory` for the histories (default: a new temporary one)")
	if err := cliflag.Parse(fs, args, usage, usageText); err != nil {
		return o, err
	}
	switch *store {
	case "sqlite":
		o.stores = []string{verify.StoreSQLite}
	case "postgres":
		o.stores = []string{verify.StorePostgres}
	case "both":
		o.stores = []string{verify.StoreSQLite, verify.StorePostgres}
	default:
		return o, fmt.Errorf("--store %q: want sqlite, postgres or both", *store)
	}
	switch *plantName {
	case "":
	case "all":
		o.plants = plant.All
	default:
		for _, n := range strings.Split(*plantName, ",") {
			if !slices.Contains(plant.All, plant.Name(n)) {
				return o, fmt.Errorf("--plant %q: want one of %s, several separated by commas, or all", n, names())
			}
			if !slices.Contains(o.plants, plant.Name(n)) {
				o.plants = append(o.plants, plant.Name(n))
			}
		}
	}
	switch {
	case o.schedules < 1:
		return o, fmt.Errorf("--schedules %d: want at least 1", o.schedules)
	case o.relays < 1:
		return o, fmt.Errorf("--relays %d: want at least 1", o.relays)
	case o.first < 0:
		return o, fmt.Errorf("--first %d: want 0 or more", o.first)
	case !(o.rate > 0):
		return o, fmt.Errorf("--rate %v: want a positive rate", o.rate)
	case o.parallel < 1:
		return o, fmt.Errorf("--parallel %d: want at least 1", o.parallel)
	}
	return o, nil
}

// defaultParallel is what fits a 2-core machine: a schedule keeps about a
// third of one processor busy over its wall time (the rest is waiting on
// timeouts, backoffs and settling), so four at once use one to one and a
// half, leaving room for the schedules' own processes to keep their
// timing, which is part of what they test. (Four at once ran 12
// schedules in 20 s where one at a time takes about 60.)
const defaultParallel = 4

func names() string {
	var s []string
	for _, n := range plant.All {
		s = append(s, string(n))
	}
	return strings.Join(s, ", ")
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return app.Report(stderr, "verify", app.Bad(err))
	}
	if o.list {
		for _, n := range plant.All {
			fmt.Fprintln(stdout, n)
		}
		return 0
	}
	if o.out == "" {
		if o.out, err = os.MkdirTemp("", "lhrelay-verify-"); err != nil {
			return app.Report(stderr, "verify", app.Badf("--out: %w", err))
		}
	} else if err := os.MkdirAll(o.out, 0o755); err != nil {
		return app.Report(stderr, "verify", app.Badf("--out: %w", err))
	}
	bin, err := os.MkdirTemp("", "lhrelay-verify-bin-")
	if err != nil {
		return app.Report(stderr, "verify", app.Bad(err))
	}
	defer os.RemoveAll(bin)
	if err := build(ctx, bin, len(o.plants) > 0, stderr); err != nil {
		return app.Report(stderr, "verify", app.Badf("building the commands: %w", err))
	}
	// Each plant's schedules, or the clean ones.
	var jobs []job
	runs := o.plants
	if len(runs) == 0 {
		runs = []plant.Name{""}
	}
	for _, p := range runs {
		out := o.out
		if len(o.plants) > 1 {
			out = filepath.Join(o.out, string(p)) // a schedule's directory is named by store, seed and index
		}
		draw := verify.Config{Relays: o.relays, Duration: o.duration, Rate: o.rate, Plant: p}
		for _, store := range o.stores {
			for i := o.first; i < o.first+o.schedules; i++ {
				jobs = append(jobs, job{plant: p, out: out, s: draw.NewSchedule(o.seed, i, store)})
			}
		}
	}
	// One config per worker: a PostgreSQL schedule restarts its server,
	// or shifts its clock, which another schedule running at once must
	// not see.
	cfgs := make([]*verify.Config, min(o.parallel, len(jobs)))
	for k := range cfgs {
		cfgs[k] = &verify.Config{Bin: bin, Relays: o.relays, Duration: o.duration, Rate: o.rate}
	}
	defer func() {
		for _, cfg := range cfgs {
			if err := cfg.Close(); err != nil {
				fmt.Fprintf(stderr, "verify: PostgreSQL: %v\n", err)
			}
		}
	}()
	if slices.Contains(o.stores, verify.StorePostgres) {
		if err := startServers(cfgs); err != nil {
			return app.Report(stderr, "verify", app.Badf("PostgreSQL: %w", err))
		}
	}
	var plantNames []string
	for _, p := range o.plants {
		plantNames = append(plantNames, string(p))
	}
	fmt.Fprintf(stdout, "verify: seed %d, schedules %d..%d on %s, %d relays, %v each, %d at once, plant %q, histories in %s\n",
		o.seed, o.first, o.first+o.schedules-1, strings.Join(o.stores, "+"), o.relays, o.duration, len(cfgs), strings.Join(plantNames, ","), o.out)

	sums := map[plant.Name]*summary{}
	for _, p := range runs {
		sums[p] = &summary{faults: map[string]int{}}
	}
	start := time.Now()
	for r := range runAll(ctx, cfgs, jobs) {
		sums[r.plant].add(r.res)
		fmt.Fprintln(stdout, line(r.plant, r.res))
	}
	code := 0
	for _, p := range runs {
		sum := sums[p]
		sum.elapsed = time.Since(start)
		sum.write(stdout, p)
		switch {
		case ctx.Err() != nil:
			code = 1
		case p != "":
			if sum.schedules == 0 || float64(sum.caught) < 0.99*float64(sum.schedules) {
				code = 1
			}
		case sum.failed > 0:
			code = 1
		}
	}
	return code
}

// job is one schedule to run, with the plant switched on for it.
type job struct {
	plant plant.Name
	out   string
	s     verify.Schedule
}

type result struct {
	plant plant.Name
	res   verify.Result
}

// startServers starts a throwaway PostgreSQL server for each config, at
// once (each takes seconds to initialise).
func startServers(cfgs []*verify.Config) error {
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for k, cfg := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg.PG, errs[k] = pgtest.StartStandalone()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// runAll runs the jobs, len(cfgs) at once, each worker on its own config,
// and yields the results in the jobs' order. Once ctx is done, no job is
// started and those not run are left out.
func runAll(ctx context.Context, cfgs []*verify.Config, jobs []job) iter.Seq[result] {
	return func(yield func(result) bool) {
		results := make([]chan result, len(jobs))
		for i := range results {
			results[i] = make(chan result, 1)
		}
		next := make(chan int)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, cfg := range cfgs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					if ctx.Err() == nil {
						// The worker's own config, used by one job
						// at a time.
						cfg.Plant, cfg.Out = jobs[i].plant, jobs[i].out
						results[i] <- result{jobs[i].plant, cfg.Run(ctx, jobs[i].s)}
					}
					close(results[i])
				}
			}()
		}
		go func() {
			defer close(next)
			for i := range jobs {
				select {
				case next <- i:
				case <-stop:
					return
				}
			}
		}()
		// Every worker has ended (its processes stopped) before this
		// returns, also when the caller stops early.
		defer wg.Wait()
		defer close(stop)
		for _, ch := range results {
			r, ok := <-ch
			if !ok {
				continue
			}
			if !yield(r) {
				return
			}
		}
	}
}

// build compiles the commands a schedule runs.
func build(ctx context.Context, dir string, planted bool, stderr io.Writer) error {
	args := []string{"build", "-o", dir + "/"}
	if planted {
		args = append(args, "-tags", "verifybugs")
	}
	// Import paths, not ./cmd/…: any directory of the module will do.
	args = append(args, "lhrelay/cmd/relay", "lhrelay/cmd/coresim", "lhrelay/cmd/resolve", "lhrelay/cmd/reprocess", "lhrelay/cmd/purge", "lhrelay/cmd/ledger")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	return cmd.Run()
}

func line(p plant.Name, r verify.Result) string {
	status := "ok"
	switch {
	case len(r.RunErrs) > 0:
		status = "ERROR"
	case len(r.Violations) > 0:
		status = "VIOLATION"
	}
	s := ""
	if p != "" {
		s = fmt.Sprintf("plant %s: ", p)
	}
	s += fmt.Sprintf("%-9s %-8s schedule %4d seed %d: %d GUIDs, %d attempts, %d posted, %d faults, %d violations, %.1fs",
		status, r.Schedule.Store, r.Schedule.Index, r.Schedule.Seed, r.GUIDs, r.Attempts, r.Posted, total(r.Faults), len(r.Violations), r.Elapsed.Seconds())
	if r.MissedWindows > 0 {
		s += fmt.Sprintf(", %d early settles missed their window", r.MissedWindows)
	}
	if len(r.Phases) > 0 {
		var ps []string
		for _, p := range r.Phases {
			ps = append(ps, fmt.Sprintf("%s %.1f", p.Name, p.D.Seconds()))
		}
		s += " (" + strings.Join(ps, ", ") + ")"
	}
	switch {
	case r.Schedule.Failover:
		s += ", failover"
	case r.Schedule.ClockShift != 0:
		s += fmt.Sprintf(", database clock %+dm", int(r.Schedule.ClockShift.Minutes()))
	}
	for i, v := range r.Violations {
		if i == 3 {
			s += fmt.Sprintf("\n    … %d more in violations.json", len(r.Violations)-3)
			break
		}
		s += fmt.Sprintf("\n    %s GUID %s (seed %d schedule %d):\n      %s", v.Check, v.GUID, r.Schedule.Seed, r.Schedule.Index, strings.Join(v.Events, "\n      "))
	}
	for _, e := range r.RunErrs {
		s += "\n    runner: " + e
	}
	return s
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

type summary struct {
	schedules, failed, caught, errored  int
	attempts, guids, posted, violations int
	missedWindows                       int
	faults                              map[string]int
	elapsed                             time.Duration
}

func (s *summary) add(r verify.Result) {
	s.schedules++
	s.attempts += r.Attempts
	s.guids += r.GUIDs
	s.posted += r.Posted
	s.violations += len(r.Violations)
	s.missedWindows += r.MissedWindows
	for k, v := range r.Faults {
		s.faults[k] += v
	}
	if !r.OK() {
		s.failed++
	}
	if len(r.RunErrs) > 0 {
		s.errored++
	}
	if len(r.Violations) > 0 {
		s.caught++
	}
}

func (s *summary) write(w io.Writer, p plant.Name) {
	fmt.Fprintf(w, "summary: %d schedules, %d GUIDs, %d attempts (%.0f/s), %d posted, %d violations, %d runner errors, %.0fs\n",
		s.schedules, s.guids, s.attempts, float64(s.attempts)/s.elapsed.Seconds(), s.posted, s.violations, s.errored, s.elapsed.Seconds())
	kinds := make([]string, 0, len(s.faults))
	for k := range s.faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, s.faults[k]))
	}
	fmt.Fprintf(w, "faults: %s\n", strings.Join(parts, " "))
	if s.missedWindows > 0 {
		// Not violations (verify.history.missedWindow), but each is an
		// early settle that tested less than it is for: said, not hidden.
		fmt.Fprintf(w, "early settles that missed their window (the relay gave up before the core's late 200; the machine was slow): %d\n", s.missedWindows)
	}
	if p != "" {
		fmt.Fprintf(w, "plant %s: caught in %d of %d schedules (%.1f%%)\n", p, s.caught, s.schedules, 100*float64(s.caught)/float64(s.schedules))
	} else if s.failed == 0 {
		fmt.Fprintln(w, "every history checks")
	}
}
