package ledger

import (
	"context"
	"errors"
	"fmt"
	"runtime"
)

// do queues o for the writer and waits for its result (queue.wait). The
// queue keeps the order of operations on one GUID.
func (s *sqliteStore) do(ctx context.Context, o operation) error {
	return s.wait(ctx, &op{o: o, done: make(chan struct{})})
}

// enqueue queues o for the writer and returns without waiting for it; the
// writer calls then with the result once the op's batch has committed (or
// failed).
func (s *sqliteStore) enqueue(ctx context.Context, o operation, then func(error)) error {
	return s.send(ctx, &op{o: o, then: then})
}

// writer is the only goroutine that writes. It runs until Close closes ops,
// and finishes every operation queued before that.
func (s *sqliteStore) writer() {
	defer close(s.writerDone)
	batch := make([]*op, 0, s.cfg.maxBatch)
	for first := range s.ops {
		batch = s.runBatch(first, batch[:0])
		for _, o := range batch {
			o.complete()
		}
		clear(batch) // drop references for the garbage collector

		// The callers just woken wait in this goroutine's processor's run
		// queue, and a goroutine inside a cgo call keeps its processor:
		// going straight on to the next batch would leave them waiting
		// while it runs in SQLite, until the runtime hands the processor
		// off during the COMMIT's fsync. Yielding lets them run first;
		// ops queue meanwhile and the next batch is bigger. With nothing
		// else runnable it returns at once. See the package comment.
		runtime.Gosched()
	}
}

// runBatch runs first and whatever else is queued (up to maxBatch) in one
// BEGIN IMMEDIATE … COMMIT, and sets every op's err. It returns the ops it
// took; the caller signals them.
func (s *sqliteStore) runBatch(first *op, batch []*op) []*op {
	// The writer never uses a caller's context: a cancelled statement
	// would interrupt the transaction every other op of the batch shares.
	// Background also keeps the driver on its no-goroutine fast path.
	ctx := context.Background()

	// Take the write lock first (this may wait for another process), then
	// collect: ops that queued meanwhile join this batch, and callers can
	// still cancel while we wait.
	tx, beginErr := s.wconn.BeginTx(ctx, nil)

	batch = take(batch, first)
drain:
	for len(batch) < s.cfg.maxBatch {
		select {
		case o, ok := <-s.ops:
			if !ok {
				break drain
			}
			batch = take(batch, o)
		default:
			break drain
		}
	}

	if beginErr != nil {
		failAll(batch, fmt.Errorf("begin: %w", beginErr))
		return batch
	}

	for _, o := range batch {
		err := o.o.run(sqliteTx{tx})
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
		tx.Rollback()
		s.runEach(ctx, batch)
		return batch
	}
	if err := tx.Commit(); err != nil {
		failAll(batch, fmt.Errorf("commit: %w", err))
		return batch
	}
	s.ncommits.Add(1)
	return batch
}

// runEach is the slow path after a statement failed in a batch: each op in a
// transaction of its own. Every op's closure overwrites its results when it
// runs, so running it again after the rollback is safe.
func (s *sqliteStore) runEach(ctx context.Context, batch []*op) {
	for _, o := range batch {
		o.err = nil
		tx, err := s.wconn.BeginTx(ctx, nil)
		if err != nil {
			o.err = fmt.Errorf("begin: %w", err)
			continue
		}
		err = o.o.run(sqliteTx{tx})
		if err != nil && !errors.Is(err, ErrStateChanged) {
			tx.Rollback()
			o.err = err
			continue
		}
		if cerr := tx.Commit(); cerr != nil {
			o.err = fmt.Errorf("commit: %w", cerr)
			continue
		}
		o.err = err
		s.ncommits.Add(1)
	}
}

// failAll gives err to every op that has no error of its own yet.
func failAll(batch []*op, err error) {
	for _, o := range batch {
		if o.err == nil {
			o.err = err
		}
	}
}
