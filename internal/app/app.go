// Package app is the runner every lhrelay command runs in: the context a
// first SIGINT or SIGTERM cancels, one exit status convention, and the one
// line on standard error that says what went wrong and where it came from.
//
// Exit statuses (README, "Exit statuses"):
//
//	0  done (or -h / --version printed)
//	1  it ran, but something needs attention: a core unreachable for some
//	   rows, a GUID not found, a stop cut short
//	2  a bad setting, or a resource named by one that cannot be used at
//	   start (a port in use, a ledger in a missing directory, an
//	   unreachable database): the line names the flag, variable or file
//
// A command's error says which by its type: Bad for status 2, anything
// else for 1, so that a failure nobody classified never looks like a
// settings mistake an operator could fix by editing a file.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// The exit statuses.
const (
	ExitOK          = 0
	ExitAttention   = 1
	ExitBadSettings = 2
)

// badSettings is an error that exits 2.
type badSettings struct{ err error }

func (e *badSettings) Error() string { return e.err.Error() }
func (e *badSettings) Unwrap() error { return e.err }

// Bad marks err as a bad setting or an unusable resource at start (exit
// status 2). Its message must name the flag, variable or file it came
// from. Bad(nil) is nil.
func Bad(err error) error {
	if err == nil {
		return nil
	}
	return &badSettings{err}
}

// Badf is Bad(fmt.Errorf(format, args...)).
func Badf(format string, args ...any) error { return Bad(fmt.Errorf(format, args...)) }

// IsBad reports whether err exits 2.
func IsBad(err error) bool {
	var b *badSettings
	return errors.As(err, &b)
}

// Code is the exit status for a command's error: 0 for none (and for
// flag.ErrHelp: -h or --version was printed), 2 for Bad, else 1.
func Code(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case IsBad(err):
		return ExitBadSettings
	}
	return ExitAttention
}

// Report writes err as one line, "name: err", to stderr (nothing for nil
// or flag.ErrHelp) and returns its exit status. A message of several lines
// (a driver's error listing each attempt) is folded into one, a line that
// repeats the one before it said once, so that a scheduler's mail or a
// journal shows the whole of it.
func Report(stderr io.Writer, name string, err error) int {
	code := Code(err)
	if code != ExitOK {
		// A package's own prefix that is the command's name is not said
		// twice ("ledger: ledger: backup").
		fmt.Fprintf(stderr, "%s: %s\n", name, strings.TrimPrefix(oneLine(err.Error()), name+": "))
	}
	return code
}

func oneLine(s string) string {
	var kept []string
	for _, line := range strings.Split(s, "\n") {
		line = strings.Join(strings.Fields(line), " ")
		if line != "" && (len(kept) == 0 || kept[len(kept)-1] != line) {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept, " ")
}

// Func is a command's body: it reads args, does its work until ctx ends,
// and returns its exit status.
type Func func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// Main runs run as the process and exits with its status.
func Main(run Func) {
	os.Exit(run(SignalContext(), os.Args[1:], os.Stdout, os.Stderr))
}

// SignalContext is cancelled by the first SIGINT or SIGTERM, which starts a
// graceful stop (or cuts a run short between rows). Default handling is
// then restored, so that a second signal kills a stop that takes too long.
func SignalContext() context.Context {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	return ctx
}
