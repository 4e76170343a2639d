package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"lhrelay/internal/faultproxy"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/plant"
)

// The stores a schedule runs on.
const (
	StoreSQLite   = "sqlite"
	StorePostgres = "postgres"
)

// The ages the relays' settling and resolve use: longer than the longest
// core delay a fault draws (so a lookup never comes before a late posting),
// and --stale-sent longer than the relay's --timeout plus 5 s, as the relay
// requires.
const (
	minAge    = "4"
	staleSent = "7"
)

// The same ages as durations, for the checker (checkSettleAge).
const (
	minAgeDuration    = 4 * time.Second
	staleSentDuration = 7 * time.Second
)

// coreCapacity is the requests the core serves at once (the rest queue):
// the core-overload fault gives each a service time.
const coreCapacity = 8

// Config is one verify run.
type Config struct {
	Bin      string             // directory holding relay, coresim, resolve, reprocess, purge
	PG       *pgtest.Standalone // the PostgreSQL schedules' server
	Relays   int
	Duration time.Duration
	Rate     float64    // business transactions a second; 0: the default
	Out      string     // where histories go
	Plant    plant.Name // "": none
	Log      io.Writer  // progress lines

	clockMu sync.Mutex
	clocks  map[time.Duration]*pgtest.Standalone // servers with a shifted clock, started when first needed
}

// clockServer returns the server whose clock is shifted by d, started
// the first time it is asked for.
func (cfg *Config) clockServer(d time.Duration) (*pgtest.Standalone, error) {
	cfg.clockMu.Lock()
	defer cfg.clockMu.Unlock()
	if s := cfg.clocks[d]; s != nil {
		return s, nil
	}
	env, err := pgtest.ClockEnv(d)
	if err != nil {
		return nil, err
	}
	s, err := pgtest.StartStandaloneWith(pgtest.Options{Env: env})
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL with its clock shifted by %v: %w", d, err)
	}
	if cfg.clocks == nil {
		cfg.clocks = map[time.Duration]*pgtest.Standalone{}
	}
	cfg.clocks[d] = s
	return s, nil
}

// Close stops the servers of cfg: its PostgreSQL schedules' server and
// those with a shifted clock, and removes their files.
func (cfg *Config) Close() error {
	cfg.clockMu.Lock()
	defer cfg.clockMu.Unlock()
	var errs []error
	for _, s := range cfg.clocks {
		errs = append(errs, s.Close())
	}
	cfg.clocks = nil
	if cfg.PG != nil {
		errs = append(errs, cfg.PG.Close())
		cfg.PG = nil
	}
	return errors.Join(errs...)
}

// world is the processes of one schedule.
type world struct {
	cfg     *Config
	s       Schedule
	dir     string
	db      string
	logf    *os.File
	core    *proc
	coreURL string
	ctlURL  string
	relays  []*relay
	httpc   *http.Client
	proxy   *faultproxy.Proxy  // between the relays and PostgreSQL; nil on SQLite and on a pair
	pg      *pgtest.Standalone // the schedule's single server; nil on SQLite and on a pair
	pair    *pgtest.Pair       // a failover schedule's servers
	// dbFaulted: the schedule makes the database unavailable for a while
	// (Schedule.faultsDatabase).
	dbFaulted bool

	mu         sync.Mutex
	earlyGUIDs map[string]bool // settled early, while the core held their call
	reprocess  []span          // when reprocess runs were under way
	kills      []kill          // the relay SIGKILLs, when each was sent
	applied    map[string]int  // faults applied, by kind
	runErrs    []string        // the runner's own failures (not violations)
}

type span struct{ from, to time.Time }

// kill is one relay-kill fault: the relay's index and when the runner sent
// SIGKILL.
type kill struct {
	relay int
	at    time.Time
}

func (w *world) env() []string {
	if w.cfg.Plant == "" {
		return nil
	}
	return []string{plant.EnvVar + "=" + string(w.cfg.Plant)}
}

func (w *world) runErr(format string, args ...any) {
	w.mu.Lock()
	w.runErrs = append(w.runErrs, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

// startCore starts cmd/coresim with its truth log and fault controls.
func (w *world) startCore() error {
	p, rest, err := startProc("coresim", filepath.Join(w.cfg.Bin, "coresim"),
		[]string{"--port", "0", "--control", "127.0.0.1:0", "--truth", filepath.Join(w.dir, "truth.jsonl"),
			"--max-concurrent", fmt.Sprint(coreCapacity), "--delay", fmt.Sprint(w.cfg.params().slow.Seconds())},
		w.env(), w.logf, "coresim listening on ", 30*time.Second)
	if err != nil {
		return err
	}
	w.core, w.coreURL = p, rest
	// The control line follows the listening line.
	ctl, err := waitLine(filepath.Join(w.dir, "run.log"), "coresim control on ", 10*time.Second)
	if err != nil {
		return err
	}
	w.ctlURL = ctl
	return nil
}

// waitLine waits for a line with prefix in the log file (the runner's own
// log, which the process's output is copied to).
func waitLine(path, prefix string, within time.Duration) (string, error) {
	deadline := time.Now().Add(within)
	for {
		b, _ := os.ReadFile(path)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, prefix) {
				return strings.TrimSpace(strings.TrimPrefix(l, prefix)), nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no line %q within %v", prefix, within)
		}
		time.Sleep(20 * time.Millisecond) // polling a file: no event to wait on
	}
}

func (w *world) control(ctx context.Context, path string, v url.Values) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.ctlURL+path+"?"+v.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := w.httpc.Do(req)
	if err != nil {
		return fmt.Errorf("core control %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("core control %s: %s: %s", path, resp.Status, b)
	}
	return nil
}

// quiesceCore waits until the core handles no request.
func (w *world) quiesceCore(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, w.ctlURL+"/inflight", nil)
		resp, err := w.httpc.Do(req)
		if err == nil {
			var n int
			_, _ = fmt.Fscan(resp.Body, &n)
			resp.Body.Close()
			if n == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the core still has requests in flight after %v", within)
		}
		time.Sleep(50 * time.Millisecond) // polling a count: no event to wait on
	}
}

// relay is one relay process, restarted on the same address.
type relay struct {
	w    *world
	i    int
	mu   sync.Mutex // one start or stop at a time
	p    *proc
	addr string
}

func (r *relay) args(port string) []string {
	return []string{"--listen", "127.0.0.1", "--port", port, "--core", r.w.coreURL,
		"--timeout", fmt.Sprint(r.w.cfg.params().timeout.Seconds()), "--connect-timeout", "0.5",
		"--db", r.w.db, "--settle-every", "0.5", "--settle-min-age", minAge, "--stale-sent", staleSent,
		"--breaker-cooldown", fmt.Sprint(breakerCooldown.Seconds())}
}

// breakerCooldown is the relays' --breaker-cooldown: the faults of a
// schedule open their breakers, and the unknown tail waits it out.
const breakerCooldown = time.Second

func (r *relay) start() error {
	port := "0"
	if r.addr != "" {
		_, port, _ = strings.Cut(r.addr, ":")
	}
	// As a supervisor would (systemd's Restart=on-failure): a relay that
	// cannot open its ledger while PostgreSQL restarts exits, and is
	// started again until the deadline.
	deadline := time.Now().Add(60 * time.Second)
	for {
		p, rest, err := startProc(fmt.Sprintf("relay%d", r.i), filepath.Join(r.w.cfg.Bin, "relay"), r.args(port), r.w.env(), r.w.logf, "relay listening on ", 30*time.Second)
		if err == nil {
			r.p, r.addr = p, rest
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(250 * time.Millisecond) // a supervisor's restart pause
	}
}

// restart kills (or stops by SIGTERM) and starts the relay again.
func (r *relay) restart(_ context.Context, kill bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.p != nil {
		if kill {
			r.p.kill()
		} else if err := r.p.term(r.w.cfg.params().timeout + 10*time.Second); err != nil {
			if r.w.dbFaulted && r.p.cmd.ProcessState.ExitCode() == 1 {
				// A relay whose ledger is failing over or restarting
				// cannot record its last outcomes within the drain
				// deadline: its stop is cut short, the calls cancelled
				// and recorded as failed calls (E901/E902), and it exits
				// 1 as documented. The checker judges what it recorded.
				fmt.Fprintf(r.w.logf, "verify: %v: a stop cut short while the database is faulted\n", err)
			} else {
				r.w.runErr("%v", err)
			}
		}
	}
	return r.start()
}

func (r *relay) stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.p == nil {
		return nil
	}
	err := r.p.term(r.w.cfg.params().timeout + 10*time.Second)
	r.p = nil
	return err
}

func (r *relay) address() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addr
}

// batch runs a batch command to its end (bounded) against the ledger. Exit
// status 1 (the core could not be reached for some rows) is what faults
// cause; so is 2 (an unusable database) while PostgreSQL restarts, which
// only a strict run (the settling phase, with no fault) reports.
func (w *world) batch(ctx context.Context, strict bool, name string, args ...string) error {
	_, err := w.batchExit(ctx, strict, name, args...)
	return err
}

// batchExit is batch, and the command's exit status (-1 when it did not
// run to its end).
func (w *world) batchExit(ctx context.Context, strict bool, name string, args ...string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	args = append([]string{"--db", w.db}, args...)
	if name != "purge" {
		args = append(args, "--core", w.coreURL)
	}
	from := time.Now()
	p, _, err := startProc(name, filepath.Join(w.cfg.Bin, name), args, w.env(), w.logf, "", 0)
	if err == nil {
		select {
		case <-p.done:
		case <-ctx.Done():
			p.kill()
		}
	}
	if name == "reprocess" {
		w.mu.Lock()
		w.reprocess = append(w.reprocess, span{from, time.Now()})
		w.mu.Unlock()
	}
	if err != nil {
		return -1, err
	}
	code := p.cmd.ProcessState.ExitCode()
	if code > 1 && (strict || code != 2) {
		return code, fmt.Errorf("%s exited %d", name, code)
	}
	return code, nil
}

// throughProxy starts a fault proxy in front of the PostgreSQL server of
// db and returns db's URL through it, for the relays and batch commands.
func (w *world) throughProxy(db string) (string, error) {
	u, err := url.Parse(db)
	if err != nil {
		return "", fmt.Errorf("ledger URL: %w", err)
	}
	p, err := faultproxy.Start(u.Host)
	if err != nil {
		return "", err
	}
	w.proxy = p
	u.Host = p.Addr()
	return u.String(), nil
}

// audit runs ledger audit on the settled ledger: the history must verify.
func (w *world) audit(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	p, _, err := startProc("ledger audit", filepath.Join(w.cfg.Bin, "ledger"), []string{"audit", "--db", w.db}, w.env(), w.logf, "", 0)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		p.kill()
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("ledger audit exited %d: the history does not verify (see run.log)", code)
	}
	return nil
}
