// Command sandbox runs the whole system in one process for a demo or for
// poking at by hand: the core simulator (internal/coresim) and the relay in
// front of it, with a ledger.
//
//	sandbox [--relay ADDR] [--core-listen ADDR] [--db PATH] [--timeout SECONDS] [--delay SECONDS] [--metrics-addr ADDR] [--log-level LEVEL]
//
// By default the core listens on 127.0.0.1:9201 and the relay on
// 127.0.0.1:9200, the ports every example in the docs uses. The ledger is a
// fresh file in a new temporary directory, removed at exit, because the
// simulated core's books are fresh at every start too: a ledger remembering
// GUIDs of a core that forgot them would only confuse a demo. Give --db to
// keep it where you say. It prints the ledger command that inspects it.
//
// The relay's --timeout defaults to 2 seconds and the core's SLOW delay to 3,
// so a transfer whose memo starts with SLOW demonstrates E901: the relay
// gives up, the core posts anyway, and resolve would settle the row.
//
// --metrics-addr serves the relay's /metrics, /healthz and /readyz, as
// relay --metrics-addr does.
//
// It prints where both listen and an lhsend command line to try, then runs
// until SIGINT or SIGTERM, and stops the relay gracefully before the core.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"lhrelay/internal/app"
	"lhrelay/internal/assemble"
	"lhrelay/internal/channel"
	"lhrelay/internal/cliflag"
	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/metrics"
)

func main() { app.Main(run) }

type options struct {
	relayAddr string
	coreAddr  string
	db        string
	timeout   time.Duration
	delay     time.Duration
	metrics   string
	logLevel  slog.Level
}

func parseArgs(args []string, usage io.Writer) (options, error) {
	fs := flag.NewFlagSet("sandbox", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o options
	fs.StringVar(&o.relayAddr, "relay", "127.0.0.1:9200", "`host:port` the relay listens on for channels")
	fs.StringVar(&o.coreAddr, "core-listen", "127.0.0.1:9201", "`host:port` the core simulator listens on (not --core: that is a core's URL for the commands that call one)")
	fs.StringVar(&o.db, "db", "", "ledger `file` (default: a new file in a temporary directory, removed at exit)")
	cliflag.PositiveSecondsVar(fs, &o.timeout, "timeout", 2*time.Second, "relay's core call timeout in `seconds`")
	cliflag.SecondsVar(fs, &o.delay, "delay", coresim.DefaultDelay, "`seconds` the core waits on a "+coresim.MemoSlow+" memo before posting")
	fs.StringVar(&o.metrics, "metrics-addr", "", "`host:port` serving the relay's /metrics, /healthz and /readyz (default off)")
	level := fs.String("log-level", "info", "log `level`: debug, info, warn or error")
	if err := cliflag.Parse(fs, args, usage, "usage: sandbox [options]\n\nRuns the core simulator and the relay in one process.\n\n"); err != nil {
		return o, err
	}
	for _, a := range []struct{ name, v string }{{"relay", o.relayAddr}, {"core-listen", o.coreAddr}, {"metrics-addr", o.metrics}} {
		if a.v == "" && a.name == "metrics-addr" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			return o, fmt.Errorf("--%s %q: want host:port", a.name, a.v)
		}
	}
	if err := o.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return o, fmt.Errorf("--log-level %q: want debug, info, warn or error", *level)
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args, stdout)
	if err != nil { // -h and --version too: Report says nothing and returns 0
		return app.Report(stderr, "sandbox", app.Bad(err))
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))

	dbPath := o.db
	if dbPath == "" {
		dir, err := os.MkdirTemp("", "lhrelay-sandbox-")
		if err != nil {
			return app.Report(stderr, "sandbox", app.Badf("--db: a temporary directory for the ledger: %w", err))
		}
		defer os.RemoveAll(dir)
		dbPath = filepath.Join(dir, "sandbox.db")
	}

	// The core first: the relay needs its address.
	delay := o.delay
	if delay == 0 {
		delay = -1 // in coresim.Config zero means the default; here none was asked for
	}
	coreLn, err := net.Listen("tcp", o.coreAddr)
	if err != nil {
		return app.Report(stderr, "sandbox", app.Badf("--core-listen %s: %w", o.coreAddr, err))
	}
	coreSrv := &http.Server{
		Handler:           coresim.New(coresim.Config{Delay: delay}),
		ReadHeaderTimeout: 10 * time.Second,
		// Longer than the relay's keep-alive idle timeout, so the relay
		// drops an idle connection before the core does.
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go coreSrv.Serve(coreLn)
	defer coreSrv.Close()
	coreURL := "http://" + coreLn.Addr().String()

	var m *metrics.Metrics
	if o.metrics != "" {
		m = metrics.New()
	}
	r, err := assemble.Start(ctx, assemble.Config{
		Listen: o.relayAddr, ListenFlag: "--relay " + o.relayAddr,
		Core: coreURL, Timeout: o.timeout,
		DB:      dbPath,
		Metrics: m, MetricsAddr: o.metrics,
		Log: log,
	})
	if err != nil {
		return app.Report(stderr, "sandbox", err)
	}
	metricsAt := ""
	if a := r.MetricsAddr(); a != nil {
		metricsAt = fmt.Sprintf("metrics on http://%s/metrics (and /healthz, /readyz)\n", a)
	}
	relayAddr := r.Addr()

	fmt.Fprintf(stdout, "core simulator listening on %s\n", coreURL)
	fmt.Fprintf(stdout, "relay listening on %s (core timeout %ss, ledger %s)\n", relayAddr, cliflag.FormatSeconds(o.timeout), dbPath)
	fmt.Fprint(stdout, metricsAt)
	fmt.Fprintf(stdout, "\ntry, from another terminal:\n\n")
	fmt.Fprintf(stdout, "  go run ./cmd/lhsend --addr %s --tx %s\n\n", relayAddr, channel.FirstSettledBy(generated.SettleByLookup).Code)
	fmt.Fprintf(stdout, "lhsend fills the fields the layout gives defaults (each has a flag, see lhsend -h) and picks a fresh GUID; the same line with --guid set to the GUID it printed replays the stored answer.\n"+
		"A memo starting with %s answers %s and posts anyway; %s answers %s; an amount over the limit answers %s.\nCtrl-C stops.\n",
		coresim.MemoSlow, generated.RspReadTimeout, coresim.MemoFail, generated.RspHTTP500, generated.RspLimitExceeded)
	fmt.Fprintf(stdout, "\nthe ledger, from another terminal: go run ./cmd/ledger stats --db %s (or list, show GUID)%s\n", dbPath, removedAtExit(o.db))

	select {
	case err := <-r.Failed():
		log.Error("relay failed", "err", err)
		r.Close()
		return 1
	case <-ctx.Done():
	}
	log.Info("stopping: relay first, then the core (a SLOW transfer still posts)")
	sctx, cancel := context.WithTimeout(context.Background(), o.timeout+5*time.Second)
	defer cancel()
	code := 0
	if err := r.Stop(sctx); err != nil {
		log.Error("relay stop cut short", "err", err)
		code = 1
	}
	if err := coreSrv.Shutdown(sctx); err != nil {
		log.Error("core stop cut short", "err", err)
		code = 1
	}
	log.Info("stopped")
	return code
}

// removedAtExit says so of the default, temporary ledger.
func removedAtExit(db string) string {
	if db == "" {
		return "; it is removed at exit: give --db to keep it"
	}
	return ""
}
