package ledger

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// An op is one write operation queued for a store's writer goroutine. Its
// operation's run executes the statements inside the writer's transaction
// and stores its result where its caller reads it (its own struct, or
// variables the caller's closure captured); the caller reads them only
// after done has been signalled and only if err is nil. For an op queued
// without waiting (enqueue) the writer tells its then instead, and done
// is unused.
type op struct {
	o     operation
	state atomic.Int32 // opQueued → opTaken (writer) or opCancelled (caller)
	err   error
	// entries are the history entries its run recorded: reset before
	// every run, chained and written by the writer before its COMMIT.
	entries []pending
	// entry is where entries start: most operations record one, and then
	// need no allocation of their own for it.
	entry [1]pending
	done  chan struct{}
	then  completer

	// PostgreSQL only: how long the op is tried again while it wrote
	// nothing, and whether an earlier try may have committed; the
	// statements of its run in a batch (runRounds) and the one statement
	// it waits for.
	deadline time.Time
	rerun    bool
	round    roundStmts
	req      roundReq
}

// runOn runs o's statements through s, recording its history entries
// afresh (an op run again after a rollback records them again).
func (o *op) runOn(s stmts) error {
	o.entries = o.entry[:0]
	return o.o.run.run(s)
}

// complete tells the op's caller its result: err is final. An op queued
// without waiting is referenced by nobody once its then is told: it goes
// back to waitedOps.
func (o *op) complete() {
	if then := o.then; then != nil {
		err := o.err
		o.recycle()
		then.completed(err)
		return
	}
	o.done <- struct{}{} // its one signal: done holds one
}

// waitedOps are the ops of wait, used again: an op whose caller has had
// its result is referenced by nobody (the writer lets go of it once it
// has signalled done), and a claim and an outcome each needed two
// allocations (the op and its channel) for it.
var waitedOps = sync.Pool{New: func() any { return &op{done: make(chan struct{}, 1)} }}

// waitedOp is an op for wait, from waitedOps.
func waitedOp(o operation, deadline time.Time) *op {
	p := waitedOps.Get().(*op)
	p.o, p.deadline = o, deadline
	return p
}

// laterOp is an op for enqueue, from waitedOps (its done channel unused):
// the writer recycles it once it has told then (complete).
func laterOp(o operation, then completer, deadline time.Time) *op {
	p := waitedOps.Get().(*op)
	p.o, p.then, p.deadline = o, then, deadline
	return p
}

// recycle gives a waited op whose result its caller has back to
// waitedOps, as new.
func (o *op) recycle() {
	*o = op{done: o.done, req: roundReq{done: o.req.done}}
	waitedOps.Put(o)
}

const (
	opQueued int32 = iota
	opTaken
	opCancelled
)

// take marks o as being executed, unless its caller gave up on it first.
func take(batch []*op, o *op) []*op {
	if o.state.CompareAndSwap(opQueued, opTaken) {
		batch = append(batch, o)
	}
	return batch
}

// queue is a writer's queue, shared by both stores. Operations on one GUID
// run in the order they were queued.
type queue struct {
	// mu guards closed and the sends on ops: shut takes it exclusively,
	// so no sender is inside a send when ops is closed.
	mu     sync.RWMutex
	closed bool
	ops    chan *op
}

func newQueue(size int) queue { return queue{ops: make(chan *op, size)} }

// wait queues o (which has a done channel) and waits for its result. A
// caller whose ctx ends while o is still queued gets ctx's error and o
// never runs: nothing was written. Once the writer has taken o, the caller
// waits for the real result, because a claim that committed while its
// caller walked away would leave a SENT row nobody is working on.
func (q *queue) wait(ctx context.Context, o *op) error {
	if err := q.send(ctx, o); err != nil {
		return err
	}
	select {
	case <-o.done:
	case <-ctx.Done():
		if o.state.CompareAndSwap(opQueued, opCancelled) {
			// The writer will skip it: nothing was written. The queue
			// still holds it: it is not used again.
			return ctx.Err()
		}
		<-o.done // taken: the outcome is decided, report it
	}
	err := o.err
	o.recycle()
	return err
}

// send queues o. It waits only while the queue is full, and only until ctx
// ends. If it returns an error (ctx, ErrClosed) nothing was queued and o's
// then is never called.
func (q *queue) send(ctx context.Context, o *op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return ErrClosed
	}
	// Room in the queue needs no ctx.Done: a context's Done channel is
	// made when first asked for, and most of the time there is room.
	select {
	case q.ops <- o:
		return nil
	default:
	}
	select {
	case q.ops <- o:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shut refuses new operations and closes ops: the writer finishes those
// already queued, then ends. Shutting it again does nothing.
func (q *queue) shut() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed { // a read-only store's, shut at its open
		return
	}
	q.closed = true
	close(q.ops)
}
