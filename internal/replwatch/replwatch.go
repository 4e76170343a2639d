// Package replwatch watches, while a relay runs, whether the commits of its
// shared ledger survive the loss of the PostgreSQL primary (SPEC 6a). The
// relay refuses at start a primary that streams to standbys asynchronously
// (ledger.CheckReplication); a standby attached later, a
// synchronous_standby_names emptied later, or the loss of every
// synchronous standby would go unnoticed without a check that repeats. A
// Watcher repeats it, logs each change, and gives what it found to the
// readiness probe (/readyz) and to the metrics.
package replwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"lhrelay/internal/ledger"
)

// DefaultEvery is how often the relay checks.
const DefaultEvery = 10 * time.Second

// ErrUnsafe is what Ready reports while a failover could forget claims the
// relay has acknowledged (and that were not allowed with
// --allow-async-replication), or while commits wait for a synchronous
// standby that is gone.
var ErrUnsafe = errors.New("replication")

// Watcher checks a ledger's replication. Its methods are safe for
// concurrent use.
type Watcher struct {
	l          *ledger.Ledger
	allowAsync bool
	log        *slog.Logger

	mu      sync.Mutex
	last    ledger.Replication
	err     error // the last check's failure
	checked bool
}

// New returns a Watcher of l; allowAsync is --allow-async-replication.
func New(l *ledger.Ledger, allowAsync bool, log *slog.Logger) *Watcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Watcher{l: l, allowAsync: allowAsync, log: log}
}

// Check reads the replication state now, keeps it, and logs it when it
// differs from the last one (a failed read is kept too, and logged, but
// says nothing about replication: Ready keeps the last state it knew).
func (w *Watcher) Check(ctx context.Context) {
	r, err := w.l.Replication(ctx)
	w.mu.Lock()
	prev, had, prevErr := w.last, w.checked, w.err
	w.err = err
	if err == nil {
		w.last, w.checked = r, true
	}
	w.mu.Unlock()
	switch {
	case err != nil:
		if prevErr == nil {
			w.log.Warn("replication check failed; the last state known stands", "err", err)
		}
	case had && prev == r:
	case !had && r.Problem() == "":
		// A safe start says nothing: the start line is enough.
	case r.Problem() == "":
		w.log.Info("replication", "standbys", r.Standbys, "sync_standbys", r.SyncStandbys, "synchronous_standby_names", r.SyncNames)
	case r.Async() && w.allowAsync:
		w.log.Warn("replication is asynchronous (allowed by --allow-async-replication): "+r.Problem(), "standbys", r.Standbys)
	default:
		w.log.Error("replication unsafe: "+r.Problem(), "standbys", r.Standbys, "sync_standbys", r.SyncStandbys, "synchronous_standby_names", r.SyncNames)
	}
}

// Run checks every every until ctx ends.
func (w *Watcher) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, every)
		w.Check(cctx)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Status is the last state read (ok false before the first good check).
func (w *Watcher) Status() (r ledger.Replication, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.checked
}

// Ready reports an unsafe replication state as an error matching
// ErrUnsafe: asynchronous standbys not allowed by --allow-async-replication,
// or no synchronous standby left. Asynchronous standbys that were allowed
// are reported as a *Warning: the relay stays ready, and says why it is
// not safe.
func (w *Watcher) Ready() error {
	r, ok := w.Status()
	switch {
	case !ok || r.Problem() == "":
		return nil
	case r.Async() && w.allowAsync:
		return &Warning{fmt.Errorf("%w: %s (allowed by --allow-async-replication)", ErrUnsafe, r.Problem())}
	}
	return fmt.Errorf("%w: %s", ErrUnsafe, r.Problem())
}

// Warning is a condition a readiness probe reports without failing: the
// relay takes frames, and an operator should know why that is not safe.
type Warning struct{ Err error }

func (w *Warning) Error() string { return w.Err.Error() }
func (w *Warning) Unwrap() error { return w.Err }
