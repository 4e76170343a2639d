package batch

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"lhrelay/internal/ledger"
)

// Body is a batch command's work: parse args, run, return the summary.
type Body func(ctx context.Context, args []string, stdout io.Writer) (*Summary, error)

// Main runs body as a command: SIGINT/SIGTERM stop it between rows, the
// summary line goes to stdout, an error to stderr as one line, and the
// process exits with the status of SPEC §7.
func Main(name string, body Body) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := body(ctx, os.Args[1:], os.Stdout)
	if s != nil {
		fmt.Fprintln(os.Stdout, s)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	}
	stop()
	os.Exit(ExitCode(err))
}

// NewFlagSet returns a flag set that reports errors instead of exiting, with
// the --db flag every batch command requires.
func NewFlagSet(name string, db *string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(db, "db", "", "ledger file (required: no default, a batch run on the wrong file is an incident)")
	return fs
}

// Parse parses args, turning every problem into a UsageError. --help
// prints the flags.
func Parse(fs *flag.FlagSet, args []string, db *string, stdout io.Writer) error {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fs.SetOutput(stdout)
			fs.PrintDefaults()
		}
		return &UsageError{err}
	}
	if fs.NArg() > 0 {
		return Usagef("unexpected argument %q", fs.Arg(0))
	}
	if *db == "" {
		return Usagef("--db is required (there is no default: a batch run on the wrong file is an incident)")
	}
	return nil
}

// OpenLedger opens an existing ledger file; a missing file or directory, or
// a file that is not a ledger, is a usage error (exit status 2).
func OpenLedger(db string) (*ledger.Ledger, error) {
	l, err := ledger.OpenExisting(db)
	if err != nil {
		return nil, &UsageError{err}
	}
	return l, nil
}
