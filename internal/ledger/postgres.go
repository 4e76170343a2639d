package ledger

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed schema_postgres.sql
var schemaPostgresSQL string

// schemaLockKey is the advisory lock that serialises schema changes of
// relays starting at once ("lhrelay" in ASCII).
const schemaLockKey int64 = 0x6c6872656c6179

// pgStore is a ledger in a PostgreSQL database shared by every relay and
// batch command pointed at it: one writer goroutine runs the queued
// operations in batches, one transaction each (pgwriter.go); reads use the
// rest of the pool. See the package doc for why, and for what an error
// means.
type pgStore struct {
	cfg      config
	link     Link
	pool     *pgxpool.Pool
	ncommits atomic.Uint64

	queue      // the writer's
	writerDone chan struct{}
	chain      *chain  // the writer's history chain
	batch      pgBatch // the writer's, reused from one round trip to the next

	lmu   sync.Mutex           // guards locks
	locks map[*pgx.Conn]string // a held TryExclusive lock's session → its key

	// syncCancelled holds the connections whose last commit reported
	// that its wait for the synchronous standby was cancelled.
	syncCancelled sync.Map // *pgconn.PgConn → struct{}

	// readOnly: opened by OpenReadOnly, with no writer; every session
	// is read-only.
	readOnly bool
}

// errNotDurable is the error of the operations of a COMMIT that the server
// reported done while warning that its wait for the synchronous standby
// was cancelled ("canceling wait for synchronous replication"): the
// transaction committed on the primary only, and a failover would forget
// it (SPEC 6a). A cancel request does that (pg_cancel_backend, an
// operator's, a pooler's). Our own timeouts cannot do it unnoticed:
// PostgreSQL stops statement_timeout before a COMMIT starts waiting for
// the standby, so only the client's deadline (statement timeout plus 2 s)
// ends the wait, and pgx then closes the connection: the COMMIT's answer
// is lost. Both cases end in ErrUnconfirmed.
var errNotDurable = fmt.Errorf("%w: committed on the primary but not confirmed by a synchronous standby (the wait was cancelled)", ErrUnconfirmed)

// onNotice notes a connection whose commit's wait for synchronous
// replication was cancelled. PostgreSQL sends the warning before the
// COMMIT's answer, so it is noted by the time Exec("COMMIT") returns.
func (s *pgStore) onNotice(c *pgconn.PgConn, n *pgconn.Notice) {
	if n.Severity == "WARNING" && strings.Contains(n.Message, "wait for synchronous replication") {
		s.syncCancelled.Store(c, struct{}{})
	}
}

// syncWaitCancelled reports, and forgets, whether c's last commit warned
// that its wait for synchronous replication was cancelled.
func (s *pgStore) syncWaitCancelled(c *pgconn.PgConn) bool {
	_, ok := s.syncCancelled.LoadAndDelete(c)
	return ok
}

func openPostgres(rawURL string, cfg config) (*pgStore, string, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, "", fmt.Errorf("ledger: open %s: %w", displayUnparsed(rawURL), err)
	}
	pcfg, shown := u.cfg, u.shown
	fail := func(err error) (*pgStore, string, error) {
		return nil, "", fmt.Errorf("ledger: open %s: %w", shown, scrubbed{err, pcfg.ConnConfig.Password})
	}
	if cfg.lookup != nil {
		pcfg.ConnConfig.LookupFunc = cfg.lookup
	}
	if err := fixSession(pcfg.ConnConfig, cfg); err != nil {
		return fail(err)
	}
	s := &pgStore{cfg: cfg, link: u.link, queue: newQueue(4 * cfg.maxBatch), writerDone: make(chan struct{}), chain: cfg.chain, locks: map[*pgx.Conn]string{}}
	pcfg.MaxConns = int32(cfg.poolSize)
	pcfg.HealthCheckPeriod = 5 * time.Second
	pcfg.AfterConnect = checkSession
	pcfg.ConnConfig.OnNotice = s.onNotice
	if pcfg.ConnConfig.ConnectTimeout == 0 {
		pcfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.pool, err = pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fail(err)
	}
	if cfg.readOnly {
		s.readOnly = true
		s.shut()
		close(s.writerDone)
		if err := checkPostgresReadOnly(ctx, s.pool); err != nil {
			s.pool.Close()
			return fail(err)
		}
		return s, shown, nil
	}
	if err := applyPostgresSchema(ctx, s.pool, cfg.mustExist); err != nil {
		s.pool.Close()
		return fail(err)
	}
	go s.writer()
	return s, shown, nil
}

// fixSession sets the session settings every connection gets, whatever
// the server's defaults, in the startup packet (RuntimeParams). A URL may
// ask for a stronger synchronous_commit (remote_apply), never a weaker one.
func fixSession(cc *pgx.ConnConfig, cfg config) error {
	p := cc.RuntimeParams
	switch sc := p["synchronous_commit"]; sc {
	case "", "on":
		p["synchronous_commit"] = "on"
	case "remote_apply":
	default:
		return fmt.Errorf("synchronous_commit=%s would let a committed claim be lost: want on (or remote_apply)", sc)
	}
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	p["statement_timeout"] = ms(cfg.statementTimeout)
	p["lock_timeout"] = ms(cfg.lockTimeout)
	// No statement here opens a transaction and waits: one left open by
	// a bug must not hold row locks for long.
	p["idle_in_transaction_session_timeout"] = ms(cfg.statementTimeout)
	// The affected-row counts decide, as on SQLite: under REPEATABLE READ
	// or SERIALIZABLE the same statements could fail instead.
	p["default_transaction_isolation"] = "read committed"
	p["TimeZone"] = "UTC"
	if cfg.readOnly {
		// The server refuses every write of the session, whatever a
		// bug of ours would try (OpenReadOnly).
		p["default_transaction_read_only"] = "on"
	}
	if p["application_name"] == "" {
		p["application_name"] = "lhrelay"
	}
	return nil
}

// checkSession refuses a connection whose synchronous_commit is not what
// fixSession asked for (an "options=-c …" in the URL could override it).
func checkSession(ctx context.Context, c *pgx.Conn) error {
	var sc string
	if err := c.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&sc); err != nil {
		return fmt.Errorf("read synchronous_commit: %w", err)
	}
	if sc != "on" && sc != "remote_apply" {
		return fmt.Errorf("synchronous_commit is %s on this connection: want on", sc)
	}
	return nil
}

// applyPostgresSchema checks that the database holds a ledger (or none yet,
// when creating is allowed) and applies schema_postgres.sql, in one
// transaction serialised by an advisory lock.
func applyPostgresSchema(ctx context.Context, pool *pgxpool.Pool, mustExist bool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLockKey); err != nil {
		return fmt.Errorf("schema lock: %w", err)
	}
	var hasTx, hasVersion bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass('tx') IS NOT NULL, to_regclass('schema_version') IS NOT NULL`).Scan(&hasTx, &hasVersion); err != nil {
		return fmt.Errorf("read tables: %w", err)
	}
	if !hasTx && mustExist {
		return fmt.Errorf("no tx table: %w", ErrNotLedger)
	}
	if hasTx {
		if err := checkPostgresTx(ctx, tx); err != nil {
			return err
		}
	}
	if hasVersion {
		var v *int64
		if err := tx.QueryRow(ctx, `SELECT MAX(version) FROM schema_version`).Scan(&v); err != nil {
			return fmt.Errorf("read schema_version: %w", err)
		}
		if v != nil && *v > SchemaVersion {
			return fmt.Errorf("schema version %d is newer than this binary's %d: %w", *v, SchemaVersion, ErrNotLedger)
		}
	}
	for _, c := range addedColumns {
		var has bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped)`, c.table, c.column).Scan(&has); err != nil {
			return fmt.Errorf("read %s columns: %w", c.table, err)
		}
		if !has {
			var hasTable bool
			if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, c.table).Scan(&hasTable); err != nil {
				return fmt.Errorf("read tables: %w", err)
			}
			if !hasTable {
				continue // created by schema_postgres.sql, with the column
			}
			if _, err := tx.Exec(ctx, `ALTER TABLE `+c.table+` ADD COLUMN `+c.column+` `+c.postgres); err != nil {
				return fmt.Errorf("add %s.%s: %w", c.table, c.column, err)
			}
		}
	}
	if _, err := tx.Conn().PgConn().Exec(ctx, schemaPostgresSQL).ReadAll(); err != nil {
		return fmt.Errorf("apply schema_postgres.sql: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit schema: %w", err)
	}
	return nil
}

// checkPostgresTx refuses a tx table that lacks a SPEC column or whose
// primary key is not guid alone (ON CONFLICT (guid) needs it).
func checkPostgresTx(ctx context.Context, tx pgx.Tx) error {
	cols, err := textColumn(ctx, tx, `SELECT attname FROM pg_attribute WHERE attrelid = 'tx'::regclass AND attnum > 0 AND NOT attisdropped`)
	if err != nil {
		return fmt.Errorf("read tx columns: %w", err)
	}
	var missing []string
	for _, c := range specColumns {
		if !slices.Contains(cols, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("tx table lacks columns %s: %w", strings.Join(missing, ", "), ErrNotLedger)
	}
	pk, err := textColumn(ctx, tx, `SELECT a.attname FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
WHERE i.indrelid = 'tx'::regclass AND i.indisprimary`)
	if err != nil {
		return fmt.Errorf("read tx primary key: %w", err)
	}
	if !slices.Equal(pk, []string{"guid"}) {
		return fmt.Errorf("tx.guid is not the primary key: %w", ErrNotLedger)
	}
	return nil
}

// textColumn reads a one-column text result.
func textColumn(ctx context.Context, tx pgx.Tx, q string) ([]string, error) {
	rows, err := tx.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// displayUnparsed is what is shown of a URL that cannot be parsed: its
// scheme and what follows the last '@' up to the query, so that no part
// of a password can be in it, whatever it holds.
func displayUnparsed(u string) string {
	scheme, rest, _ := strings.Cut(u, "://")
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		rest = rest[at+1:]
	}
	rest, _, _ = strings.Cut(rest, "?")
	return scheme + "://" + rest
}

func (s *pgStore) dialect() *dialect { return postgresDialect }

func (s *pgStore) commits() uint64 { return s.ncommits.Load() }

// errNotSent marks a failure that certainly wrote nothing: no connection
// could be had, or the transaction ended before its COMMIT was sent (or
// the driver knows that no byte of the COMMIT left: pgconn.SafeToRetry).
var errNotSent = errors.New("not sent to the database")

// do queues o for the writer and waits for its result (queue.wait); what
// never committed is tried again for up to WithRetry's wait.
func (s *pgStore) do(ctx context.Context, o operation) error {
	if s.readOnly {
		return ErrReadOnly
	}
	return s.wait(ctx, waitedOp(o, time.Now().Add(s.cfg.retryFor)))
}

// enqueue queues o and returns; the writer calls then with its result.
func (s *pgStore) enqueue(ctx context.Context, o operation, then completer) error {
	if s.readOnly {
		return ErrReadOnly
	}
	return s.send(ctx, laterOp(o, then, time.Now().Add(s.cfg.retryLaterFor)))
}

// isStatementError: the server refused the statement (a constraint, a
// timeout): its transaction rolled back, and running it again would fail
// the same way.
func isStatementError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Severity == "ERROR"
}

// runOnce runs o alone in a transaction of its own on one pooled
// connection (the writer's slow path, after a statement of a batch was
// refused), and says, as runBatch does, what a failure means: until the
// COMMIT is sent nothing is written, so a refused statement is o's own
// error and any other failure wrote nothing (errNotSent); only a COMMIT
// whose answer was lost leaves o's outcome unknown. Each statement runs
// to its end, bounded by the statement timeout plus a margin.
func (s *pgStore) runOnce(ctx context.Context, p *op) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.statementTimeout+2*time.Second)
	defer cancel()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("%w: no connection: %w", errNotSent, err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%w: begin: %w", errNotSent, err)
	}
	err = p.runOn(&pgStmts{ctx: ctx, tx: tx, again: p.rerun, o: p})
	var head *ChainHead
	if err == nil || errors.Is(err, ErrStateChanged) {
		var herr error
		if head, herr = s.appendHistoryTx(ctx, tx, p.entries); herr != nil {
			err = herr
		}
	}
	if err != nil && !errors.Is(err, ErrStateChanged) {
		tx.Rollback(context.Background())
		if isStatementError(err) && !s.headBehind(err) {
			return err
		}
		return fmt.Errorf("%w: %w", errNotSent, err)
	}
	if cerr := tx.Commit(ctx); cerr != nil {
		if pgconn.SafeToRetry(cerr) {
			return fmt.Errorf("%w: commit: %w", errNotSent, cerr)
		}
		if isStatementError(cerr) {
			return cerr
		}
		s.chain.markStale()
		return fmt.Errorf("%w: the answer to COMMIT was lost: %w", ErrUnconfirmed, cerr)
	}
	if s.syncWaitCancelled(conn.Conn().PgConn()) {
		s.chain.markStale()
		return errNotDurable
	}
	s.chain.advance(head)
	s.ncommits.Add(1)
	return err // nil, or the refusal o decided
}

// appendHistoryTx writes entries in tx (runOnce's slow path), chained after
// the writer's head at the server's time, and
// returns the head they lead to.
func (s *pgStore) appendHistoryTx(ctx context.Context, tx pgx.Tx, ps []pending) (*ChainHead, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	read := (&pgStmts{ctx: ctx, tx: tx}).queryRow
	if s.chain.isStale() {
		if err := s.chain.reloadHead(read); err != nil {
			return nil, err
		}
	}
	var at time.Time // after the op's statements, as in sendRound
	if err := read(`SELECT clock_timestamp()`).Scan(&at); err != nil {
		return nil, fmt.Errorf("read the database's time: %w", err)
	}
	es, head := s.chain.seal(ps, at)
	for _, q := range s.chain.statements(postgresDialect, es, ps, head) {
		if _, err := tx.Exec(ctx, dollarPlaceholders(q.q), q.args...); err != nil {
			return nil, fmt.Errorf("append history: %w", err)
		}
	}
	return &head, nil
}

// pgStmts runs an operation's statements in its transaction.
type pgStmts struct {
	ctx   context.Context
	tx    pgx.Tx
	again bool
	o     *op // records the history entries
}

func (t *pgStmts) change(q string, args []any, entry func(scanner) (pending, error)) (int64, error) {
	rows, err := t.tx.Query(t.ctx, dollarPlaceholders(q), args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	return recordEach(rows, t.o, entry)
}

func (t *pgStmts) changeOne(q string, args []any, p pending) (int64, error) {
	tag, err := t.tx.Exec(t.ctx, dollarPlaceholders(q), args...)
	if err != nil {
		return 0, err
	}
	return recordOne(tag.RowsAffected(), t.o, p)
}

func (t *pgStmts) note(p pending) { t.o.entries = append(t.o.entries, p) }

func (t *pgStmts) rerun() bool { return t.again }

func (t *pgStmts) exec(q string, args ...any) (int64, error) {
	if err := notTxWrite(q); err != nil {
		return 0, err
	}
	tag, err := t.tx.Exec(t.ctx, dollarPlaceholders(q), args...)
	return tag.RowsAffected(), err
}

func (t *pgStmts) queryRow(q string, args ...any) scanner {
	return pgRow{t.tx.QueryRow(t.ctx, dollarPlaceholders(q), args...)}
}

// pgRow maps pgx.ErrNoRows to errNoRows.
type pgRow struct{ r pgx.Row }

func (r pgRow) Scan(dest ...any) error {
	err := r.r.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return errNoRows
	}
	return err
}

// pgReader runs read queries on the pool, or in one transaction.
type pgReader struct {
	q interface {
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}
}

func (s *pgStore) read() querier { return pgReader{s.pool} }

// snapshot runs fn in a REPEATABLE READ, read-only transaction: one
// snapshot for all its queries.
func (s *pgStore) snapshot(ctx context.Context, fn func(querier) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	return fn(pgReader{tx})
}

func (r pgReader) query(ctx context.Context, q string, args ...any) (rowSet, error) {
	return r.q.Query(ctx, dollarPlaceholders(q), args...)
}

func (r pgReader) queryRow(ctx context.Context, q string, args ...any) scanner {
	return pgRow{r.q.QueryRow(ctx, dollarPlaceholders(q), args...)}
}

// ping checks that a connection can be had, that the tx table can be
// read, and that the server accepts writes (after a failover the old
// primary may come back as a standby), on a read connection and through
// the writer.
func (s *pgStore) ping(ctx context.Context) error {
	var standby bool
	var n int
	err := s.pool.QueryRow(ctx, `SELECT pg_is_in_recovery(), (SELECT COUNT(*) FROM (SELECT 1 FROM tx LIMIT 1) t)`).Scan(&standby, &n)
	if err != nil {
		return err
	}
	if s.readOnly {
		return nil // a standby serves reads as well
	}
	if standby {
		return errors.New("connected to a standby (read-only server): want the primary (target_session_attrs=read-write)")
	}
	err = s.do(ctx, operation{run: opFunc(func(tx stmts) error {
		return tx.queryRow(`SELECT pg_is_in_recovery()`).Scan(&standby)
	})})
	if err != nil {
		return fmt.Errorf("write path: %w", err)
	}
	if standby {
		return errors.New("the writer's connection is to a standby: want the primary (target_session_attrs=read-write)")
	}
	return nil
}

// close refuses new operations, lets the writer finish every operation
// already queued, then closes the pool.
func (s *pgStore) close() error {
	s.shut()
	<-s.writerDone
	s.lmu.Lock()
	held := make([]*pgx.Conn, 0, len(s.locks))
	for c := range s.locks {
		held = append(held, c)
	}
	s.lmu.Unlock()
	for _, c := range held {
		s.unlock(c)
	}
	s.pool.Close()
	return nil
}
