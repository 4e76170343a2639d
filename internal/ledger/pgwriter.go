package ledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The fate of an operation after one try: done (its err is final), or to
// be tried again in a later batch.
type fate int

const (
	fateDone fate = iota
	fateRetry
)

// writer is the only goroutine that writes, on one connection at a time:
// it takes every operation queued (up to maxBatch), runs them all in one
// transaction and commits once. Operations that never committed (the
// database unreachable, a connection lost before the COMMIT was sent) are
// tried again, ahead of newer ones, until their deadline.
func (s *pgStore) writer() {
	defer close(s.writerDone)
	var carry []*op
	wait := 10 * time.Millisecond
	open := true
	for open || len(carry) > 0 {
		batch := carry
		carry = nil
		if len(batch) == 0 {
			first, ok := <-s.ops
			if !ok {
				return
			}
			batch = take(batch, first)
		} else {
			s.backoff(batch, wait)
			wait = min(2*wait, 500*time.Millisecond)
		}
	drain:
		for open && len(batch) < s.cfg.maxBatch {
			select {
			case p, ok := <-s.ops:
				if !ok {
					open = false
					break drain
				}
				batch = take(batch, p)
			default:
				break drain
			}
		}

		fates := s.runBatch(batch)
		now := time.Now()
		for i, p := range batch {
			if fates[i] == fateRetry && now.Before(p.deadline) {
				carry = append(carry, p)
				continue
			}
			p.complete()
		}
		if len(carry) == 0 {
			wait = 10 * time.Millisecond
		}
		runtime.Gosched() // let the callers just woken run (see the SQLite writer)
	}
}

// backoff waits before trying batch again: d, or less if an operation's
// deadline comes first.
func (s *pgStore) backoff(batch []*op, d time.Duration) {
	for _, p := range batch {
		d = min(d, time.Until(p.deadline))
	}
	if d > 0 {
		t := time.NewTimer(d)
		<-t.C
	}
}

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
	begun, err := runRounds(ctx, c, batch)
	if err != nil {
		if begun {
			c.Exec(ctx, "ROLLBACK") // a connection left in a transaction is dropped by the pool anyway
		}
		if isStatementError(err) {
			return s.runEachAlone(batch)
		}
		return retryAll(fmt.Errorf("%w: %w", errNotSent, err)) // the transaction died uncommitted
	}
	if begun {
		_, err = c.Exec(ctx, "COMMIT")
	}
	switch {
	case err == nil && s.syncWaitCancelled(c.PgConn()):
		return s.unconfirmed(batch, fates, errNotDurable)
	case err == nil:
		s.ncommits.Add(1)
		for i := range batch {
			fates[i] = fateDone // each op's own result (nil, or a refusal)
		}
		return fates
	case pgconn.SafeToRetry(err):
		return retryAll(fmt.Errorf("%w: commit: %w", errNotSent, err))
	case isStatementError(err):
		return s.runEachAlone(batch)
	}
	return s.unconfirmed(batch, fates, fmt.Errorf("%w: the answer to COMMIT was lost: %w", ErrUnconfirmed, err))
}

// unconfirmed sets the fate of a batch whose COMMIT may or may not have
// landed, or landed without becoming durable: claims fail with err (they
// must not run again, see the package doc), transitions are tried again
// knowing that they may have landed.
func (s *pgStore) unconfirmed(batch []*op, fates []fate, err error) []fate {
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
		p.err = s.runOnce(context.Background(), p.o, p.rerun)
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
func runRounds(ctx context.Context, c *pgx.Conn, batch []*op) (begun bool, failed error) {
	events := make(chan roundEvent, len(batch))
	for i, p := range batch {
		go func() {
			err := p.o.run(&roundStmts{seq: i, guid: p.o.guid, rerunFlag: p.rerun, events: events})
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
			failed = sendRound(ctx, c, reqs, !begun)
			begun = true
		} else {
			for _, r := range reqs {
				r.err = failed
			}
		}
		for _, r := range reqs {
			close(r.done)
		}
	}
	return begun, failed
}

// sendRound sends one round's statements as one pgx.Batch (after a BEGIN
// when begin) and sets each request's result.
func sendRound(ctx context.Context, c *pgx.Conn, reqs []*roundReq, begin bool) error {
	slices.SortFunc(reqs, func(a, b *roundReq) int {
		return cmp.Or(cmp.Compare(a.guid, b.guid), cmp.Compare(a.seq, b.seq))
	})
	b := &pgx.Batch{}
	if begin {
		b.Queue("BEGIN")
	}
	for _, r := range reqs {
		b.Queue(dollarPlaceholders(r.q), r.args...)
	}
	res := c.SendBatch(ctx, b)
	var failed error
	if begin {
		if _, err := res.Exec(); err != nil {
			failed = err
		}
	}
	for _, r := range reqs {
		if r.dest == nil {
			var tag pgconn.CommandTag
			tag, r.err = res.Exec()
			r.n = tag.RowsAffected()
		} else {
			r.err = res.QueryRow().Scan(r.dest...)
			if errors.Is(r.err, pgx.ErrNoRows) {
				r.err = errNoRows
			}
		}
		if r.err != nil && r.err != errNoRows && failed == nil {
			failed = r.err
		}
	}
	if err := res.Close(); err != nil && failed == nil {
		failed = err
	}
	return failed
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
	n    int64
	err  error
	done chan struct{}
}

// roundStmts is stmts for one operation of a batch: each statement waits
// for its round.
type roundStmts struct {
	seq       int
	guid      string
	rerunFlag bool
	events    chan<- roundEvent
}

func (r *roundStmts) rerun() bool { return r.rerunFlag }

func (r *roundStmts) send(q string, args, dest []any) *roundReq {
	req := &roundReq{seq: r.seq, guid: r.guid, q: q, args: args, dest: dest, done: make(chan struct{})}
	r.events <- roundEvent{seq: r.seq, req: req}
	<-req.done
	return req
}

func (r *roundStmts) exec(q string, args ...any) (int64, error) {
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
