// Command demo tells the relay's whole story in a few seconds, for a
// newcomer and for CI:
//
//	go run ./cmd/demo [--json] [--keep-db PATH] [--verbose]
//
// It starts, in this process and on free ports of 127.0.0.1, the core
// simulator (internal/coresim, SLOW delay 1.5 s) and the relay
// (internal/relay, --timeout 1 s, a ledger in a temporary directory), plus a
// second relay on the same ledger whose core is a closed port. Then it sends
// real frames over TCP with internal/channel, one step at a time: a
// transfer, each business rejection, a core error, a malformed frame, an
// unknown transaction, a balance inquiry, a replay, a reused GUID, a slow
// transfer (a duplicate sent while it is in flight, its timeout, its
// settlement by batch.Resolve once the core has posted it, and its retry),
// and a transfer to a core that cannot be reached (settled by
// batch.Reprocess, then retried).
//
// Each step prints a row: what was sent, the answer and its meaning, how
// many POSTs for that GUID reached the core, and the ledger row. The run
// ends with the ledger's contents, the core's own per-GUID counts, and a
// check that no GUID was posted twice.
//
// --json prints the same as one JSON document. --keep-db PATH keeps the
// ledger there (the file must not exist: the simulated core's books are
// fresh at every run). --verbose sends the relays' log to standard error.
//
// Exit status: 0 when every step got the expected answer and no GUID was
// posted twice, 1 otherwise, 2 for bad arguments.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"lhrelay/internal/app"
	"lhrelay/internal/cliflag"
)

func main() { app.Main(runCommand) }

// runCommand is the demo as a process: its settings, its run, its exit status.
func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args, stdout)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		err = app.Bad(err)
	}
	if err == nil {
		o.log = stderr
		err = o.run(ctx, stdout)
	}
	return app.Report(stderr, "demo", err)
}

// options are the command line's.
type options struct {
	json    bool
	keepDB  string
	verbose bool
	log     io.Writer // the relays' log with verbose
}

func parseArgs(args []string, usage io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&o.json, "json", false, "print the steps, the ledger and the core's counts as one JSON document")
	fs.StringVar(&o.keepDB, "keep-db", "", "keep the ledger in this `file` (which must not exist) instead of a temporary one")
	fs.BoolVar(&o.verbose, "verbose", false, "write the relays' log to standard error")
	if err := cliflag.Parse(fs, args, usage, "usage: demo [--json] [--keep-db PATH] [--verbose]\n\nRuns the core simulator and the relay in-process and walks through every response code.\n\n"); err != nil {
		return o, err
	}
	if o.keepDB != "" {
		if _, err := os.Stat(o.keepDB); err == nil {
			return o, fmt.Errorf("--keep-db %s: the file exists; the demo starts from an empty ledger", o.keepDB)
		}
	}
	return o, nil
}

// run is the demo with the default options: a temporary ledger, the table
// on out, no log.
func run(ctx context.Context, out io.Writer) error {
	return options{}.run(ctx, out)
}

// errSteps is returned when a step did not get what it expected, or a GUID
// was posted twice: the report says which.
var errSteps = errors.New("some steps did not go as expected (see the report)")

// run starts the world, walks through the story, reports it on out, and
// stops everything.
func (o options) run(ctx context.Context, out io.Writer) (err error) {
	w, err := start(ctx, o)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.stop()) }()

	if err := w.story(ctx); err != nil {
		return err
	}
	rep, err := w.report(ctx)
	if err != nil {
		return err
	}
	if o.json {
		err = rep.writeJSON(out)
	} else {
		err = rep.writeText(out)
	}
	if err != nil {
		return err
	}
	if !rep.OK {
		return errSteps
	}
	return nil
}
