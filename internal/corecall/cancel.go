package corecall

import (
	"context"
	"sync"
)

// cancelWatch ends the calls in flight when their ctx ends, by moving
// their connections' deadline into the past (pconn.interrupt).
//
// context.AfterFunc per call would do, but costs two allocations and a
// registration with the parent context on every call. The relay makes
// every call under one long-lived context (cancelled only when it stops),
// so the client registers once per context (told apart by its Done
// channel, which contexts that end together share) and keeps the
// connections in flight under it in a set. A call under any other context
// while the adopted one is still live falls back to context.AfterFunc.
type cancelWatch struct {
	mu    sync.Mutex
	done  <-chan struct{} // the adopted context's Done; nil: none yet
	ended bool            // the adopted context has ended
	calls map[*pconn]struct{}
}

// start registers pc, about to be used by a call under ctx, and returns
// the function the call runs when it is done with pc: it reports whether
// ctx's end interrupted pc (the connection is then not pooled again).
func (w *cancelWatch) start(ctx context.Context, pc *pconn) (finish func() bool) {
	done := ctx.Done()
	if done == nil {
		return nil
	}
	w.mu.Lock()
	if w.done != done {
		if w.done != nil && !w.ended {
			w.mu.Unlock()
			stop := context.AfterFunc(ctx, pc.interrupt)
			return func() bool { return !stop() }
		}
		w.done, w.ended = done, false
		if w.calls == nil {
			w.calls = make(map[*pconn]struct{})
		}
		clear(w.calls)
		context.AfterFunc(ctx, func() { w.end(done) })
	}
	if w.ended {
		// ctx ended after the caller looked: interrupt at once.
		w.mu.Unlock()
		pc.interrupt()
		return func() bool { return true }
	}
	pc.interrupted = false
	w.calls[pc] = struct{}{}
	w.mu.Unlock()
	return pc.finishWatched
}

// finish is pconn.finishWatched: it takes pc out of the set.
func (w *cancelWatch) finish(pc *pconn) bool {
	w.mu.Lock()
	delete(w.calls, pc)
	interrupted := pc.interrupted
	w.mu.Unlock()
	return interrupted
}

// end interrupts every call in flight under the context whose Done is
// done, which has ended.
func (w *cancelWatch) end(done <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done != done {
		return
	}
	w.ended = true
	for pc := range w.calls {
		pc.interrupted = true
		pc.interrupt()
	}
	clear(w.calls)
}
