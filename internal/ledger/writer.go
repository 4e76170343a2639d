package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"time"
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
		err := o.runOn(sqliteTx{tx, o})
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
	head, err := s.appendHistory(tx, batch...)
	if err != nil {
		tx.Rollback()
		s.runEach(ctx, batch)
		return batch
	}
	if err := tx.Commit(); err != nil {
		// SQLite reports its own file's failures: nothing was committed.
		failAll(batch, fmt.Errorf("commit: %w", err))
		return batch
	}
	s.chain.advance(head)
	s.ncommits.Add(1)
	return batch
}

// appendHistory writes the history entries the ops recorded, chained after
// the writer's head, in tx; it returns the head they lead to, which becomes
// the writer's once tx commits (nil when there were none). The entries'
// time is this host's clock, which on SQLite is the database's
// (CURRENT_TIMESTAMP reads it too).
func (s *sqliteStore) appendHistory(tx *sql.Tx, batch ...*op) (*ChainHead, error) {
	var ps []pending
	for _, o := range batch {
		if o.err == nil || errors.Is(o.err, ErrStateChanged) {
			ps = append(ps, o.entries...)
		}
	}
	if len(ps) == 0 {
		return nil, nil
	}
	if s.chain.isStale() {
		if err := s.chain.reloadHead(sqliteTx{tx: tx}.queryRow); err != nil {
			return nil, err
		}
	}
	es, head := s.chain.seal(ps, time.Now())
	for _, q := range s.chain.statements(sqliteDialect, es, head) {
		if _, err := tx.Exec(q.q, q.args...); err != nil {
			return nil, fmt.Errorf("append history: %w", err)
		}
	}
	return &head, nil
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
		err = o.runOn(sqliteTx{tx, o})
		if err != nil && !errors.Is(err, ErrStateChanged) {
			tx.Rollback()
			o.err = err
			continue
		}
		o.err = err
		head, herr := s.appendHistory(tx, o)
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

// failAll gives err to every op that has no error of its own yet.
func failAll(batch []*op, err error) {
	for _, o := range batch {
		if o.err == nil {
			o.err = err
		}
	}
}
