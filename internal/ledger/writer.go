package ledger

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/mattn/go-sqlite3"
)

// do queues o for the writer and waits for its result (queue.wait). The
// queue keeps the order of operations on one GUID.
func (s *sqliteStore) do(ctx context.Context, o operation) error {
	if s.readOnly {
		return ErrReadOnly
	}
	return s.wait(ctx, waitedOp(o, time.Time{}))
}

// enqueue queues o for the writer and returns without waiting for it; the
// writer calls then with the result once the op's batch has committed (or
// failed).
func (s *sqliteStore) enqueue(ctx context.Context, o operation, then completer) error {
	if s.readOnly {
		return ErrReadOnly
	}
	return s.send(ctx, laterOp(o, then, time.Time{}))
}

// A batchStep is what a store does with one batch of the writer loop
// (runWriter). The loop is one for both stores; they differ only in how a
// batch runs.
type batchStep interface {
	// startBatch is called before the queue is drained, and returns the
	// batch begun. SQLite takes its write lock here (this may wait for
	// another process): operations queued meanwhile join the batch, and
	// their callers can still cancel.
	startBatch() batchRun
}

// A batchRun is one batch of the writer loop, begun.
type batchRun interface {
	// early runs the statements of o, the batch's first operation, before
	// the rest of the batch is known; run does not run them again. A
	// store whose statements cannot run yet does nothing here.
	early(o *op)
	// run runs the batch drained and sets every op's err, and says what
	// became of each (nil: all done).
	run(batch []*op) []fate
}

// The fate of an operation after one try: done (its err is final), or to
// be tried again in a later batch, ahead of newer ones, until its
// deadline.
type fate int

const (
	fateDone fate = iota
	fateRetry
)

// outcomeLinger is how long an outcome nobody waits for waits for another
// operation to share its commit (runWriter): about two fsyncs of a
// common disk, far longer than a channel takes to send its next frame
// once it has its answer.
const outcomeLinger = time.Millisecond

// How long the writer waits before trying a batch again: doubling from
// the first to the last, back to the first after a batch with nothing to
// try again.
const (
	retryWaitFirst = 10 * time.Millisecond
	retryWaitMax   = 500 * time.Millisecond
)

// runWriter is a store's writer goroutine, the only one that writes: it
// takes every operation queued (up to maxBatch), runs them all in one
// transaction with step and commits once, then tells each caller. It runs
// until the queue is shut and every operation queued before that is done.
//
// After telling a batch's callers it yields its processor: the callers it
// woke are queued on it, and going straight on to the next batch would
// leave them waiting while it runs inside the database driver (see the
// package comment). With nothing else runnable it returns at once.
//
// An outcome queued by FinishLater, which nobody waits for, that arrives
// alone waits up to linger for another operation before its batch
// commits (company): with one channel, the channel's next claim arrives
// while the outcome would be committing, and waited for that commit and
// then for its own; now both share one. No answer waits longer for it:
// the outcome's answer was given when it was queued, the claim joins the
// batch as soon as it arrives, and anything that waits for its result (a
// Claim, a Finish, a Ping) ends the wait. The outcome's statements run
// while it waits (batchRun.early), so that the claim it waited for waits
// only for its own statements and the COMMIT.
func runWriter(q *queue, maxBatch int, linger time.Duration, step batchStep) {
	buf := make([]*op, 0, maxBatch)
	var carry []*op // to be tried again
	wait := retryWaitFirst
	open := true
	var lingering *time.Timer
	for open || len(carry) > 0 {
		batch := append(buf[:0], carry...)
		carry = carry[:0]
		var run batchRun
		if len(batch) == 0 {
			first, ok := <-q.ops
			if !ok {
				return
			}
			run = step.startBatch()
			batch = take(batch, first)
			if first.then != nil && linger > 0 {
				if len(batch) == 1 {
					run.early(first)
				}
				var second *op
				if second, open = company(q, linger, &lingering); second != nil {
					batch = take(batch, second)
				}
			}
		} else {
			backoff(batch, wait)
			wait = min(2*wait, retryWaitMax)
			run = step.startBatch()
		}
	drain:
		for open && len(batch) < maxBatch {
			select {
			case o, ok := <-q.ops:
				if !ok {
					open = false
					break drain
				}
				batch = take(batch, o)
			default:
				break drain
			}
		}

		fates := run.run(batch)
		now := time.Now()
		for i, o := range batch {
			if fates != nil && fates[i] == fateRetry && now.Before(o.deadline) {
				carry = append(carry, o)
				continue
			}
			o.complete()
		}
		if len(carry) == 0 {
			wait = retryWaitFirst
		}
		clear(batch) // drop references for the garbage collector
		runtime.Gosched()
	}
}

// company waits up to d for the next queued operation; open is false if
// the queue was shut meanwhile. t is the writer's timer, made on first use.
func company(q *queue, d time.Duration, t **time.Timer) (next *op, open bool) {
	select {
	case o, ok := <-q.ops:
		return o, ok
	default:
	}
	if *t == nil {
		*t = time.NewTimer(d)
	} else {
		(*t).Reset(d)
	}
	select {
	case o, ok := <-q.ops:
		(*t).Stop()
		return o, ok
	case <-(*t).C:
		return nil, true
	}
}

// backoff waits before trying batch again: d, or less if an operation's
// deadline comes first.
func backoff(batch []*op, d time.Duration) {
	for _, o := range batch {
		d = min(d, time.Until(o.deadline))
	}
	if d > 0 {
		t := time.NewTimer(d)
		<-t.C
	}
}

// writer runs the SQLite store's writer loop, on the driver's own
// connection (sqliteWriter): all of it inside the one Raw call that
// database/sql allows the connection to be used in.
func (s *sqliteStore) writer() {
	defer close(s.writerDone)
	ran := false
	err := s.wconn.Raw(func(dc any) error {
		c, ok := dc.(*sqlite3.SQLiteConn)
		if !ok {
			return fmt.Errorf("the driver's connection is a %T", dc)
		}
		s.w = newSQLiteWriter(c)
		defer s.w.close()
		ran = true
		runWriter(&s.queue, s.cfg.maxBatch, s.cfg.linger, s)
		return nil
	})
	if !ran {
		// Cannot happen with the driver this package registers; if it
		// did, every operation fails rather than waits.
		s.w, s.wErr = nil, fmt.Errorf("ledger: writer connection: %w", err)
		runWriter(&s.queue, s.cfg.maxBatch, s.cfg.linger, s)
	}
}

// startBatch begins the batch's BEGIN IMMEDIATE transaction (taking the
// write lock first). An operation here is never tried again: every fate
// is done.
func (s *sqliteStore) startBatch() batchRun {
	b := &s.batch
	*b = sqliteBatch{s: s}
	if s.w == nil {
		b.err = s.wErr
		return b
	}
	b.tx, b.err = s.w.begin()
	if b.err != nil {
		b.err = fmt.Errorf("begin: %w", b.err)
	}
	return b
}

// A sqliteBatch is the writer's transaction begun, and the op whose
// statements ran early in it, with their result. There is one at a time:
// the store keeps it (sqliteStore.batch).
type sqliteBatch struct {
	s      *sqliteStore
	tx     driver.Tx
	err    error // the transaction could not begin
	ran    *op
	ranErr error
}

func (b *sqliteBatch) early(o *op) {
	if b.err == nil {
		b.ran, b.ranErr = o, o.runOn(b.s.txFor(o))
	}
}

// run runs batch in the transaction and commits, and sets every op's err;
// the op that ran early keeps its result.
func (b *sqliteBatch) run(batch []*op) []fate {
	defer func() { b.ran, b.ranErr = nil, nil }() // the op goes back to its pool
	if b.err != nil {
		failAll(batch, b.err)
		return nil
	}
	s := b.s
	for _, o := range batch {
		err := b.ranErr
		if o != b.ran {
			err = o.runOn(s.txFor(o))
		}
		if err == nil || errors.Is(err, ErrStateChanged) {
			// A refusal decided by a conditional statement that changed
			// nothing: the op's own result, and the batch goes on.
			o.err = err
			continue
		}
		// A statement failed. SQLite may have rolled the whole
		// transaction back (disk full, I/O error) or kept it with this
		// op half done: either way nothing of this batch may commit as
		// it stands. Undo it all and run every op alone, so that one op's
		// failure stays its own and nobody is told of a write that was
		// undone.
		b.tx.Rollback()
		s.runEach(batch)
		return nil
	}
	head, err := s.appendHistory(batch...)
	if err != nil {
		b.tx.Rollback()
		s.runEach(batch)
		return nil
	}
	if err := b.tx.Commit(); err != nil {
		// SQLite reports its own file's failures: nothing was committed.
		failAll(batch, fmt.Errorf("commit: %w", err))
		return nil
	}
	s.chain.advance(head)
	s.ncommits.Add(1)
	return nil
}

// appendHistory writes the history entries the ops recorded, chained after
// the writer's head, in the writer's transaction; it returns the head they
// lead to, which becomes the writer's once the transaction commits (nil
// when there were none). The entries' time is this host's clock, which on
// SQLite is the database's (CURRENT_TIMESTAMP reads it too).
func (s *sqliteStore) appendHistory(batch ...*op) (*ChainHead, error) {
	ps := s.pending[:0]
	for _, o := range batch {
		if o.err == nil || errors.Is(o.err, ErrStateChanged) {
			ps = append(ps, o.entries...)
		}
	}
	defer func() { s.pending = ps[:0]; clear(ps) }()
	if len(ps) == 0 {
		return nil, nil
	}
	if s.chain.isStale() {
		if err := s.chain.reloadHead(sqliteTx{w: s.w}.queryRow); err != nil {
			return nil, err
		}
	}
	es, head := s.chain.seal(ps, time.Now())
	for _, o := range batch {
		if o.o.guidArg != nil {
			s.chain.room.bx.boxedGUID(o.o.guid, o.o.guidArg)
		}
		if o.o.keyArg != nil {
			s.chain.room.bx.boxedKey(o.o.keyArg)
		}
	}
	for _, q := range s.chain.statements(sqliteDialect, es, ps, head) {
		if _, err := s.w.exec(q.q, q.args); err != nil {
			return nil, fmt.Errorf("append history: %w", err)
		}
	}
	return &head, nil
}

// runEach is the slow path after a statement failed in a batch: each op in a
// transaction of its own. Every op's run overwrites its results when it
// runs, so running it again after the rollback is safe.
func (s *sqliteStore) runEach(batch []*op) {
	for _, o := range batch {
		o.err = nil
		tx, err := s.w.begin()
		if err != nil {
			o.err = fmt.Errorf("begin: %w", err)
			continue
		}
		err = o.runOn(s.txFor(o))
		if err != nil && !errors.Is(err, ErrStateChanged) {
			tx.Rollback()
			o.err = err
			continue
		}
		o.err = err
		head, herr := s.appendHistory(o)
		if herr != nil {
			tx.Rollback()
			o.err = herr
			continue
		}
		if cerr := tx.Commit(); cerr != nil {
			o.err = fmt.Errorf("commit: %w", cerr)
			continue
		}
		s.chain.advance(head)
		s.ncommits.Add(1)
	}
}

// txFor is the writer's statements for o: one sqliteTx the writer
// points at each op in turn, since one boxed per op is an allocation.
func (s *sqliteStore) txFor(o *op) stmts {
	s.tx = sqliteTx{s.w, o}
	return &s.tx
}

// failAll gives err to every op that has no error of its own yet.
func failAll(batch []*op, err error) {
	for _, o := range batch {
		if o.err == nil {
			o.err = err
		}
	}
}
