// Package batch holds the logic of the operators' batch commands (SPEC §7):
// resolve settles UNKNOWN (and orphaned SENT) rows by asking the core,
// reprocess resends FAILED rows that were definitely never sent, and purge
// deletes settled rows past the idempotency window. The cmd/ packages only
// parse flags and call in here, so the rules are tested without processes.
//
// Every command selects rows, then handles each with a conditional ledger
// transition: a row that the relay (or another batch run) changed in the
// meantime is left alone and counted as "skipped", never overwritten.
package batch

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Exit statuses shared by the batch commands (SPEC §7).
const (
	// ExitOK: every selected row was handled by the rules.
	ExitOK = 0
	// ExitCoreUnreachable: the run finished, but the core could not be
	// reached (or answered unusably) for some rows; they are unchanged and a
	// scheduler should alert.
	ExitCoreUnreachable = 1
	// ExitUsage: bad arguments, or a missing or unusable database.
	ExitUsage = 2
)

// Summary counts the outcomes of one run, in the order they were first seen.
type Summary struct {
	Command string
	DryRun  bool
	mu      sync.Mutex
	order   []string
	counts  map[string]int
}

// NewSummary starts a summary whose line lists the given outcomes first,
// zero counts included, so the line always has the same shape for scripts.
func NewSummary(command string, outcomes ...string) *Summary {
	s := &Summary{Command: command, counts: map[string]int{}}
	for _, o := range outcomes {
		s.order = append(s.order, o)
		s.counts[o] = 0
	}
	return s
}

// Add counts one row with outcome.
func (s *Summary) Add(outcome string) { s.AddN(outcome, 1) }

// AddN counts n rows with outcome.
func (s *Summary) AddN(outcome string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.counts[outcome]; !ok {
		s.order = append(s.order, outcome)
	}
	s.counts[outcome] += n
}

// Count returns how many rows had outcome.
func (s *Summary) Count(outcome string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[outcome]
}

// Each calls f for every outcome in order.
func (s *Summary) Each(f func(outcome string, n int)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.order {
		f(o, s.counts[o])
	}
}

// String is the one-line summary, e.g.
// "resolve: selected=3 done=2 failed=0 unreachable=1 skipped=0 unknown_tx=0 undecodable=0".
func (s *Summary) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	b.WriteString(s.Command)
	if s.DryRun {
		b.WriteString(" (dry run)")
	}
	b.WriteString(":")
	for _, o := range s.order {
		fmt.Fprintf(&b, " %s=%d", o, s.counts[o])
	}
	return b.String()
}

// Progress reports "n/total" on a terminal for long runs; elsewhere (a log
// file, a scheduler) it stays silent so logs hold only the summary line.
type Progress struct {
	w     io.Writer
	label string
	total int
	last  time.Time
	done  int
}

// NewProgress writes to w only when w is a terminal.
func NewProgress(w io.Writer, label string, total int) *Progress {
	if !IsTerminal(w) {
		w = nil
	}
	return &Progress{w: w, label: label, total: total}
}

// Step counts one handled row and redraws at most ten times a second.
func (p *Progress) Step() {
	p.done++
	if p.w == nil || (time.Since(p.last) < 100*time.Millisecond && p.done < p.total) {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, "\r%s: %d/%d", p.label, p.done, p.total)
}

// Finish ends the progress line.
func (p *Progress) Finish() {
	if p.w != nil && p.done > 0 {
		fmt.Fprintln(p.w)
	}
}

// IsTerminal reports whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// UsageError is a bad argument: exit status 2 with a one-line message.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef builds a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{fmt.Errorf(format, args...)}
}

// ExitCode maps a command's error to its exit status: usage and database
// problems are 2, a run that finished with unreachable rows is 1.
func ExitCode(err error) int {
	var ue *UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp): // -h or --version printed
		return ExitOK
	case errors.Is(err, ErrCoreUnreachable):
		return ExitCoreUnreachable
	case errors.As(err, &ue):
		return ExitUsage
	}
	return ExitUsage
}

// ErrCoreUnreachable is returned, after the summary, by a run that left rows
// unchanged because the core could not be reached for them; each command
// wraps it with what exactly it left.
var ErrCoreUnreachable = errors.New("the core could not be reached")
