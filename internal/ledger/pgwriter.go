package ledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// writer runs the PostgreSQL store's writer loop. Operations that never
// committed (the database unreachable, a connection lost before the COMMIT
// was sent) are tried again until their deadline.
func (s *pgStore) writer() {
	defer close(s.writerDone)
	runWriter(&s.queue, s.cfg.maxBatch, s.cfg.linger, s)
}

// startBatch returns the batch, which takes its connection and begins its
// transaction when it runs.
func (s *pgStore) startBatch() batchRun { return pgRun{s} }

// A pgRun runs its statements in rounds once it knows them all
// (runRounds): it runs none early.
type pgRun struct{ s *pgStore }

func (pgRun) early(*op)                {}
func (b pgRun) run(batch []*op) []fate { return b.s.runBatch(batch) }

// runBatch runs batch in one transaction and says what became of each
// operation. Nothing is committed before the COMMIT, so every failure
// before it leaves nothing behind: a refused statement (one operation's
// own error) is found by running each operation alone; anything else is
// tried again. Only a COMMIT whose answer was lost leaves the outcome
// unknown: claims then fail (they must not run again, see the package
// doc), transitions are tried again knowing that they may have landed.
func (s *pgStore) runBatch(batch []*op) []fate {
	fates := make([]fate, len(batch))
	retryAll := func(err error) []fate {
		for i, p := range batch {
			p.err, fates[i] = err, fateRetry
		}
		return fates
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.statementTimeout+2*time.Second)
	defer cancel()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return retryAll(fmt.Errorf("%w: no connection: %w", errNotSent, err))
	}
	defer conn.Release()
	c := conn.Conn()
	s.syncWaitCancelled(c.PgConn()) // a warning left from before this batch is not its own
	begun, at, err := runRounds(ctx, &s.batch, c, batch)
	var head *ChainHead
	if err == nil && begun {
		head, err = s.commitWithHistory(ctx, c, batch, at)
		if err != nil && isStatementError(err) {
			c.Exec(ctx, "ROLLBACK") // the COMMIT was skipped with the statement that failed
			if s.headBehind(err) {
				return retryAll(fmt.Errorf("%w: %w", errNotSent, err))
			}
			return s.runEachAlone(batch)
		}
	} else if err != nil {
		if begun {
			c.Exec(ctx, "ROLLBACK") // a connection left in a transaction is dropped by the pool anyway
		}
		if isStatementError(err) {
			return s.runEachAlone(batch)
		}
		return retryAll(fmt.Errorf("%w: %w", errNotSent, err)) // the transaction died uncommitted
	}
	switch {
	case err == nil && s.syncWaitCancelled(c.PgConn()):
		return s.unconfirmed(batch, fates, errNotDurable)
	case err == nil:
		s.chain.advance(head)
		s.ncommits.Add(1)
		for i := range batch {
			fates[i] = fateDone // each op's own result (nil, or a refusal)
		}
		return fates
	case errors.Is(err, errNotSent):
		c.Exec(ctx, "ROLLBACK")
		return retryAll(err)
	case pgconn.SafeToRetry(err):
		return retryAll(fmt.Errorf("%w: commit: %w", errNotSent, err))
	case isStatementError(err):
		return s.runEachAlone(batch)
	}
	return s.unconfirmed(batch, fates, fmt.Errorf("%w: the answer to COMMIT was lost: %w", ErrUnconfirmed, err))
}

// headBehind reports whether err is the history refusing an entry
// whose place in the chain is taken: the head in the database is ahead
// of the writer's. A COMMIT whose answer was lost may still be committing
// on the server when the next transaction reads the head (reloadHead);
// its entries then take the places this one sealed, and the INSERT fails
// once it committed. The head is marked stale, so that the operations,
// which wrote nothing, run again after it, read afresh: otherwise every
// later transaction would seal the same places and fail the same way.
func (s *pgStore) headBehind(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == pgUniqueViolation && pe.ConstraintName == "history_pkey" {
		s.chain.markStale()
		return true
	}
	return false
}

// pgUniqueViolation is PostgreSQL's SQLSTATE for a duplicate key.
const pgUniqueViolation = "23505"

// unconfirmed sets the fate of a batch whose COMMIT may or may not have
// landed, or landed without becoming durable: claims fail with err (they
// must not run again, see the package doc), transitions are tried again
// knowing that they may have landed. The history chain's head in the
// database is as uncertain: the next batch reads it first.
func (s *pgStore) unconfirmed(batch []*op, fates []fate, err error) []fate {
	s.chain.markStale()
	for i, p := range batch {
		p.err = err
		if p.o.rerunnable {
			p.rerun, fates[i] = true, fateRetry
		}
	}
	return fates
}

// runEachAlone is the slow path after a statement was refused inside a
// batch: every operation in a transaction of its own (autocommit), so one
// operation's failure stays its own.
func (s *pgStore) runEachAlone(batch []*op) []fate {
	fates := make([]fate, len(batch))
	for i, p := range batch {
		p.err = s.runOnce(context.Background(), p)
		switch {
		case p.err == nil || errors.Is(p.err, ErrStateChanged) || isStatementError(p.err):
		case errors.Is(p.err, errNotSent):
			fates[i] = fateRetry
		case p.o.rerunnable:
			p.rerun, fates[i] = true, fateRetry
		}
	}
	return fates
}

// runRounds runs every operation's statements in one transaction on c,
// pipelined: each
// operation runs on a goroutine of its own against roundStmts, and once
// every one still running is waiting for a statement's result, those
// statements go to the server together in one pgx.Batch (one round trip),
// ordered by GUID (then by queue order), so that batches of relays
// sharing the database take row locks in one order. The first round
// starts with the BEGIN, saving a round trip; begun says whether it was
// sent (the caller then ends the transaction). It returns the first
// statement's failure, after which every statement fails.
//
// The operations were written to run one after another (SQLite); run side
// by side they stay correct for the reason concurrent transactions do:
// every decision is taken by a conditional statement on the row as it is
// when the statement runs, and operations on one GUID keep their queue
// order within each round.
func runRounds(ctx context.Context, pb *pgBatch, c *pgx.Conn, batch []*op) (begun bool, at time.Time, failed error) {
	events := make(chan roundEvent, len(batch))
	for i, p := range batch {
		go func() {
			p.round = roundStmts{seq: i, guid: p.o.guid, rerunFlag: p.rerun, events: events, o: p}
			err := p.runOn(&p.round)
			events <- roundEvent{seq: i, finished: true, err: err}
		}()
	}
	live := len(batch)
	for live > 0 {
		var reqs []*roundReq
		for len(reqs) < live {
			ev := <-events
			if ev.finished {
				batch[ev.seq].err = ev.err
				live--
				continue
			}
			reqs = append(reqs, ev.req)
		}
		if len(reqs) == 0 {
			break
		}
		if failed == nil {
			failed = sendRound(ctx, pb, c, reqs, !begun, &at)
			begun = true
		} else {
			for _, r := range reqs {
				r.err = failed
			}
		}
		for _, r := range reqs {
			r.done <- struct{}{} // its one signal: done holds one
		}
	}
	return begun, at, failed
}

// commitWithHistory chains the history entries the batch's operations
// recorded after the writer's head, at the server's time after the batch's
// last round (at), writes them with the chain's new head in one round
// trip, then sends the COMMIT. It returns the head (nil when the batch
// recorded no entries), the writer's once the COMMIT succeeded. An error
// before the COMMIT was sent left nothing committed: a refused statement
// is returned as it is (the caller runs each operation alone), any other
// is errNotSent. An error of the COMMIT is the caller's to classify.
//
// The COMMIT goes alone, as a simple query, and not in the history's
// round trip: in a pgx.Batch it would be prepared first, and a connection
// lost then would be taken for a COMMIT whose answer was lost.
func (s *pgStore) commitWithHistory(ctx context.Context, c *pgx.Conn, batch []*op, at time.Time) (*ChainHead, error) {
	var ps []pending
	for _, p := range batch {
		if p.err == nil || errors.Is(p.err, ErrStateChanged) {
			ps = append(ps, p.entries...)
		}
	}
	var head *ChainHead
	if len(ps) > 0 {
		if s.chain.isStale() {
			err := s.chain.reloadHead(func(q string, args ...any) scanner {
				return pgRow{c.QueryRow(ctx, dollarPlaceholders(q), args...)}
			})
			if err != nil {
				return nil, notSentUnlessRefused(err)
			}
		}
		es, h := s.chain.seal(ps, at)
		head = &h
		pb := &s.batch
		pb.reset(c)
		qs := s.chain.statements(postgresDialect, es, ps, h)
		for _, q := range qs {
			pb.queue(ctx, dollarPlaceholders(q.q), q.args)
		}
		pb.send(ctx)
		for range qs {
			pb.result(nil, nil)
		}
		if err := pb.close(); err != nil {
			return nil, notSentUnlessRefused(err)
		}
	}
	_, err := c.Exec(ctx, "COMMIT")
	return head, err
}

// notSentUnlessRefused marks an error before the COMMIT as errNotSent,
// unless the server refused a statement (its transaction is aborted, and
// the caller runs each operation alone).
func notSentUnlessRefused(err error) error {
	if isStatementError(err) {
		return err
	}
	return fmt.Errorf("%w: %w", errNotSent, err)
}

// sendRound sends one round's statements as one batch (after a BEGIN
// when begin) and sets each request's result.
func sendRound(ctx context.Context, pb *pgBatch, c *pgx.Conn, reqs []*roundReq, begin bool, at *time.Time) error {
	slices.SortFunc(reqs, func(a, b *roundReq) int {
		return cmp.Or(cmp.Compare(a.guid, b.guid), cmp.Compare(a.seq, b.seq))
	})
	pb.reset(c)
	if begin {
		pb.queue(ctx, "BEGIN", nil)
	}
	for _, r := range reqs {
		pb.queue(ctx, dollarPlaceholders(r.q), r.args)
	}
	// The time by the server's clock once this round's statements have
	// run: the last round's is the history entries' time. It is taken
	// after the transaction locked every row it changes, so of two
	// transactions changing one row, the one that changed it first has the
	// earlier time (now(), the transaction's start, would not say so).
	pb.queue(ctx, "SELECT clock_timestamp()", nil)
	pb.send(ctx)
	if begin {
		pb.result(nil, nil)
	}
	for _, r := range reqs {
		var rows, changed int64
		rows, changed, r.err = pb.result(r.rows, r.dest)
		r.n = changed
		if r.rows != nil {
			r.n = rows
		}
	}
	pb.result(nil, []any{at})
	return pb.close()
}

type roundEvent struct {
	seq      int
	finished bool
	err      error
	req      *roundReq
}

// roundReq is one statement waiting for its round.
type roundReq struct {
	seq  int
	guid string
	q    string
	args []any
	dest []any // nil: exec
	// rows: a change's statement, whose result rows it reads.
	rows func(scanner) error
	n    int64
	err  error
	done chan struct{} // signalled once per round: holds one
}

// roundStmts is stmts for one operation of a batch: each statement waits
// for its round.
type roundStmts struct {
	seq       int
	guid      string
	rerunFlag bool
	events    chan<- roundEvent
	o         *op // records the history entries
}

func (r *roundStmts) change(q string, args []any, entry func(scanner) (pending, error)) (int64, error) {
	var got []pending
	req := r.request(q, args, nil)
	req.rows = func(s scanner) error {
		p, err := entry(s)
		got = append(got, p)
		return err
	}
	r.events <- roundEvent{seq: r.seq, req: req}
	<-req.done
	if req.err == nil {
		r.o.entries = append(r.o.entries, got...)
	}
	return req.n, req.err
}

func (r *roundStmts) changeOne(q string, args []any, p pending) (int64, error) {
	req := r.send(q, args, nil)
	if req.err != nil {
		return 0, req.err
	}
	return recordOne(req.n, r.o, p)
}

func (r *roundStmts) note(p pending) { r.o.entries = append(r.o.entries, p) }

func (r *roundStmts) rerun() bool { return r.rerunFlag }

// request is the op's roundReq, set up for a statement: an operation has
// one statement waiting at a time, so each op keeps one (op.req), and its
// done channel, from one statement and one use to the next.
func (r *roundStmts) request(q string, args, dest []any) *roundReq {
	req := &r.o.req
	done := req.done
	if done == nil {
		done = make(chan struct{}, 1)
	}
	*req = roundReq{seq: r.seq, guid: r.guid, q: q, args: args, dest: dest, done: done}
	return req
}

func (r *roundStmts) send(q string, args, dest []any) *roundReq {
	req := r.request(q, args, dest)
	r.events <- roundEvent{seq: r.seq, req: req}
	<-req.done
	return req
}

func (r *roundStmts) exec(q string, args ...any) (int64, error) {
	if err := notTxWrite(q); err != nil {
		return 0, err
	}
	req := r.send(q, args, nil)
	return req.n, req.err
}

func (r *roundStmts) queryRow(q string, args ...any) scanner {
	return lazyRow{r, q, args}
}

// lazyRow sends its statement when it is scanned: the destinations belong
// to the operation, which waits meanwhile.
type lazyRow struct {
	r    *roundStmts
	q    string
	args []any
}

func (l lazyRow) Scan(dest ...any) error { return l.r.send(l.q, l.args, dest).err }
