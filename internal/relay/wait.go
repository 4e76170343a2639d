package relay

import (
	"context"
	"sync"
	"time"
)

// boundedWait is a context that ends at a deadline, for a call that
// almost always returns without waiting (Ledger.FinishLater with room in
// the ledger's queue). context.WithTimeout makes its timer and its
// context up front, four allocations a transfer; boundedWait makes them
// only when the call asks for Done, that is when it has to wait, and
// then ends exactly when that timeout would have. A connection keeps one
// and starts it for each call (its frames are handled one at a time).
type boundedWait struct {
	parent   context.Context
	deadline time.Time

	mu     sync.Mutex
	ctx    context.Context // made by the first Done
	cancel context.CancelFunc
}

var _ context.Context = (*boundedWait)(nil)

// start bounds the wait from now by d, under parent.
func (w *boundedWait) start(parent context.Context, d time.Duration) {
	w.mu.Lock()
	w.parent, w.deadline = parent, time.Now().Add(d)
	w.ctx, w.cancel = nil, nil
	w.mu.Unlock()
}

// stop ends it, as a WithTimeout's cancel does.
func (w *boundedWait) stop() {
	w.mu.Lock()
	if w.cancel != nil {
		w.cancel()
	}
	w.ctx, w.cancel = nil, nil
	w.mu.Unlock()
}

func (w *boundedWait) Deadline() (time.Time, bool) {
	if d, ok := w.parent.Deadline(); ok && d.Before(w.deadline) {
		return d, true
	}
	return w.deadline, true
}

func (w *boundedWait) Done() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx == nil {
		w.ctx, w.cancel = context.WithDeadline(w.parent, w.deadline)
	}
	return w.ctx.Done()
}

func (w *boundedWait) Err() error {
	w.mu.Lock()
	ctx := w.ctx
	w.mu.Unlock()
	if ctx != nil {
		return ctx.Err()
	}
	if err := w.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(w.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (w *boundedWait) Value(key any) any { return w.parent.Value(key) }
