// Package batchcmd is the command-line side of the batch commands resolve,
// reprocess and purge (SPEC §7): the flags they share, opening the ledger
// and the core, the summary line, the --metrics-file for a textfile
// collector, and their exit statuses. The rules themselves are
// internal/batch's.
package batchcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"lhrelay/internal/app"
	"lhrelay/internal/batch"
	"lhrelay/internal/cliflag"
	"lhrelay/internal/ledger"
)

// Command is the part every batch command shares: its name, the --db flag
// that has no default (a batch run on the wrong file is a real incident),
// and --metrics-file, which writes the run's outcome counts in Prometheus
// text format for node_exporter's textfile collector, so a scheduler's runs
// are watched like the relay.
type Command struct {
	Name        string
	DB          string
	MetricsFile string
	Verbose     bool
	// AllowAsync accepts a PostgreSQL primary that streams to standbys
	// asynchronously (--allow-async-replication).
	AllowAsync bool
	Flags      *flag.FlagSet
}

// New returns a command with a flag set that reports errors instead of
// exiting.
func New(name string) *Command {
	c := &Command{Name: name, Flags: flag.NewFlagSet(name, flag.ContinueOnError)}
	c.Flags.SetOutput(io.Discard)
	c.Flags.StringVar(&c.DB, "db", "", "ledger: SQLite `file`, or postgres:// URL of a shared ledger (required; no default)")
	c.Flags.StringVar(&c.MetricsFile, "metrics-file", "", "write the run's outcome counts to `file` in Prometheus text format (for a textfile collector)")
	c.Flags.BoolVar(&c.Verbose, "v", false, "log every row handled on stderr")
	c.Flags.BoolVar(&c.AllowAsync, "allow-async-replication", false, "run on a PostgreSQL primary whose standbys replicate asynchronously (synchronous_standby_names empty), accepting that a failover may forget what this run wrote")
	return c
}

// Given reports whether the flag name was set on the command line.
func (c *Command) Given(name string) bool {
	set := false
	c.Flags.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// Logger logs on stderr: warnings (rows left unchanged) always, every row
// with -v.
func (c *Command) Logger() *slog.Logger {
	level := slog.LevelWarn
	if c.Verbose {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// Parse reads the command's settings with cliflag.Read (command line,
// LHRELAY_ variables, --config file); every problem is app.Bad. --help
// prints the flags, --version the version; both return an error that
// errors.Is flag.ErrHelp (exit status 0).
func (c *Command) Parse(args []string, stdout io.Writer) error {
	if err := cliflag.Parse(c.Flags, args, stdout, "usage: "+c.Name+" --db PATH [options]\n\n"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return app.Bad(err)
	}
	if c.DB == "" {
		return app.Badf("--db is required (there is no default: a batch run on the wrong file is an incident)")
	}
	return nil
}

// Open opens the existing ledger named by --db (a SQLite file or a
// PostgreSQL URL); a missing file or directory, an unreachable database,
// one that is not a ledger, or a primary that replicates asynchronously
// without --allow-async-replication (SPEC 6a), is a bad setting (exit
// status 2).
//
// The ledger's history names this run (the command, host, process and a
// run id) as the actor of every change it makes.
func (c *Command) Open() (*ledger.Ledger, error) {
	l, err := ledger.OpenExisting(c.DB, ledger.WithActor(ledger.NewActor(c.Name)))
	if err != nil {
		return nil, app.Badf("--db: %w", err)
	}
	if l.Link() == ledger.LinkUnverified {
		slog.Warn("the link to the ledger is not verified (--db states an sslmode that does not check the server): whoever sits on it can rewrite the ledger", "db", l.Path())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.CheckReplication(ctx, c.AllowAsync); err != nil {
		l.Close()
		return nil, app.Badf("--db: %w", err)
	}
	return l, nil
}

// Body is a batch command's work: parse args, run, return the summary.
type Body func(ctx context.Context, c *Command, args []string, stdout io.Writer) (*batch.Summary, error)

// Code is a batch run's exit status (SPEC §7): 0 when every selected row
// was handled, 1 when the core could not be reached for some (they are
// unchanged: a scheduler should alert), 2 for a bad setting, an unusable
// database, or a run the ledger broke off.
func Code(err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) || errors.Is(err, batch.ErrCoreUnreachable) {
		return app.Code(err)
	}
	return app.ExitBadSettings
}

// Main runs body as a process in app's runner: SIGINT/SIGTERM stop it
// between rows, the summary line goes to stdout, an error to stderr as one
// line, and the process exits with Code.
func Main(name string, body Body) {
	app.Main(func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		return Run(ctx, name, body, args, stdout, stderr)
	})
}

// Run is Main's work, for tests: it returns the exit status.
func Run(ctx context.Context, name string, body Body, args []string, stdout, stderr io.Writer) int {
	c := New(name)
	s, err := body(ctx, c, args, stdout)
	if s != nil {
		fmt.Fprintln(stdout, s)
	}
	code := Code(err)
	if code == app.ExitBadSettings {
		err = app.Bad(err)
	}
	app.Report(stderr, name, err)
	if s != nil && c.MetricsFile != "" {
		if werr := WriteMetricsFile(c.MetricsFile, s, code, time.Now()); werr != nil {
			fmt.Fprintf(stderr, "%s: --metrics-file: %v\n", name, werr)
		}
	}
	return code
}

// WriteMetricsFile writes the run's counts, exit status and end time in
// Prometheus text format, atomically (a collector never reads half a file).
func WriteMetricsFile(path string, s *batch.Summary, exitCode int, end time.Time) error {
	reg := prometheus.NewRegistry()
	rows := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lhrelay_batch_last_run_rows",
		Help: "Rows handled by the last run of a batch command, by outcome.",
	}, []string{"command", "outcome"})
	exit := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lhrelay_batch_last_run_exit_code",
		Help: "Exit status of the last run: 0 ok, 1 core unreachable for some rows, 2 usage or database error.",
	}, []string{"command"})
	at := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lhrelay_batch_last_run_timestamp_seconds",
		Help: "When the last run of a batch command ended.",
	}, []string{"command"})
	reg.MustRegister(rows, exit, at)
	s.Each(func(outcome string, n int) { rows.WithLabelValues(s.Command, outcome).Set(float64(n)) })
	exit.WithLabelValues(s.Command).Set(float64(exitCode))
	at.WithLabelValues(s.Command).Set(float64(end.Unix()))
	if err := prometheus.WriteToTextfile(path, reg); err != nil {
		return fmt.Errorf("metrics file: %w", err)
	}
	return nil
}
