// Package batch holds the logic of the operators' batch commands (SPEC §7):
// resolve settles UNKNOWN (and orphaned SENT) rows by asking the core,
// reprocess resends FAILED rows that were definitely never sent (asking the
// core first, since a lookup that came too early can leave a posted
// transfer FAILED), and purge deletes settled rows past the idempotency
// window. It holds the rules
// only: the commands' flags, exit statuses and metrics file are
// internal/app/batchcmd's, so that the relay, which runs Resolve inside
// itself (internal/settle), carries no command-line machinery.
//
// A lookup's 404 makes a row resendable, so it must come from the lookup
// itself, not from a core reached at the wrong path: LookupGuard distrusts
// a transaction's 404s when the core answers a new GUID's lookup exactly as
// a path it does not serve and no lookup of it answered 200, and then
// resolve leaves the rows and exits 1 naming the core's URL; reprocess's
// lookup before each resend goes through the same guard.
//
// Every command selects rows, then handles each with a conditional ledger
// transition: a row that the relay (or another batch run) changed in the
// meantime is left alone and counted as "skipped", never overwritten.
// resolve and reprocess take their rows oldest first by the time each was
// first claimed, a page at a time, and handle many at once (Pace): a
// bounded number of core calls, admitted as the relay admits its own, with
// the rows' ledger writes sharing the ledger's group commits.
package batch

import (
	"errors"
	"fmt"
	"strings"
	"sync"
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

// ErrCoreUnreachable is returned, after the summary, by a run that left rows
// unchanged because the core could not be reached for them; each command
// wraps it with what exactly it left.
var ErrCoreUnreachable = errors.New("the core could not be reached")
