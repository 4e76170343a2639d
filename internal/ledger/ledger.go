// Package ledger is the durable idempotency ledger of the LH-STD relay
// (SPEC section 6): a SQLite file with one row per GUID, and the one place
// that owns the row state machine (RECEIVED, SENT, DONE, UNKNOWN, FAILED).
// The relay and the batch commands (resolve, reprocess, purge) are built on
// it. It is content-agnostic: it stores frames and response codes it is
// given and never parses a frame.
//
// # Why the SQLite settings are what they are
//
// Every connection gets its PRAGMAs from the DSN, because a PRAGMA run once
// after sql.Open reaches only one pooled connection:
//
//   - _journal_mode=WAL: readers (Get, List, Stats, another process's
//     reads) never block the writer and the writer never blocks them; a
//     commit appends to the WAL and needs one fsync.
//   - _synchronous=FULL: in WAL mode NORMAL does not fsync at COMMIT, so
//     a power loss could forget a claim the core was already called for.
//     FULL fsyncs the WAL at every COMMIT: a claimed row is on disk before
//     Claim returns (SPEC 6: durable before the core is called).
//   - _txlock=immediate: every transaction starts with BEGIN IMMEDIATE,
//     taking the write lock up front. A deferred transaction that reads
//     and then writes gets SQLITE_BUSY at once when another connection
//     (the relay and a batch command on the same file) wrote meanwhile,
//     ignoring the busy timeout; BEGIN IMMEDIATE waits instead.
//   - _busy_timeout (default 10 s, WithBusyTimeout): SQLite has one writer
//     at a time even in WAL. A process that finds the write lock taken
//     waits up to this long. Every writer here holds the lock for one short
//     transaction (a group-commit batch, or a purge chunk), so normal
//     contention never surfaces as "database is locked".
//   - _foreign_keys=1: none today; set so a later migration that adds one
//     is enforced everywhere.
//   - never cache=shared: it turns SQLITE_BUSY into SQLITE_LOCKED, which
//     ignores the busy timeout.
//   - _stmt_cache_size: the same few statements run many thousand times a
//     second; the driver's per-connection cache avoids re-preparing them.
//
// The files are opened as SQLite URIs with mode=rwc (Open) or mode=rw
// (OpenExisting): SQLite never creates a directory, and mode=rw never
// creates a file, so a batch command pointed at a wrong path fails instead
// of starting an empty ledger.
//
// # Group commit
//
// The disk does about 2,000 fsyncs a second, and each transfer needs a
// claim and an outcome: one commit each would cap the relay near 1,000
// transfers a second. So one writer goroutine owns the only write
// connection. Claim, Finish, Transition, Reclaim, PurgeDone and Ping
// enqueue an operation and wait; FinishLater enqueues one and returns, and
// the writer calls back with its result. The writer takes the first queued
// operation, runs BEGIN IMMEDIATE, then takes whatever else is queued (up
// to WithMaxBatch, default 256) and runs each operation's own statements in
// that one transaction, in queue order, then COMMITs once. Each operation's
// own affected-row counts decide its result: two claims of one GUID in the
// same batch run one after the other, so the first INSERT affects one row
// and the second none. Replies go out only after the COMMIT succeeded; if
// it fails, every operation in the batch gets the error and none reports
// success. There is no timer: while one batch is being fsynced the next one
// queues up, so batches grow with load and a lone request is not delayed.
//
// After replying to a batch the writer yields its processor
// (runtime.Gosched) before starting the next. The callers it woke are queued
// on its processor, and a goroutine in a cgo call keeps its processor; so
// without the yield they would wait there while the writer executes the next
// batch in SQLite. Measured with the relay at 256 channels (core in its own
// process): 11.4k instead of 9.0k transfers a second, half the commits per
// transfer; ledger alone at 16 channels 21k instead of 14.7k; at 64
// channels both within noise.
//
// Operations run without savepoints, because none can leave half its work
// behind: each makes at most one write, as its last statement, and SQLite
// statements are atomic. A refusal (a conditional UPDATE that matched no
// row, ErrStateChanged) is that operation's result and the batch goes on.
// Any other failed statement rolls the whole batch back and the writer
// runs its operations again, each in a transaction of its own: one
// operation's failure stays its own, and if SQLite itself aborted the
// transaction (disk full, I/O error) nobody is told a write succeeded that
// was undone. A savepoint per operation did the same at three statements
// more per operation: about half the writer's time per operation.
//
// Cancelling an operation's context before the writer has taken it drops
// the operation: the method returns the context's error and nothing was
// written. Once the writer has taken it (only after BEGIN IMMEDIATE
// succeeded, so never while waiting for another process's lock) the method
// waits for the COMMIT and reports the real result, because a claim that
// committed while its caller walked away would leave a SENT row nobody is
// working on. The writer itself never runs a caller's context: an
// interrupted statement would abort everybody's transaction.
//
// Reads (Get, List, Stats, a dry-run PurgeDone) use a separate pool of
// read-only (query_only) connections (WithReadConns, default 4) and see
// every committed write.
//
// # Time
//
// updated_at is datetime('now') text, 'YYYY-MM-DD HH:MM:SS' in UTC, so
// comparisons are text comparisons against a Go time formatted the same
// way, at whole seconds (the fraction of the Go time is dropped). List
// selects updated_at <= t, so a row exactly min-age old is selected;
// PurgeDone deletes updated_at < t, so a row exactly N days old stays.
package ledger

import (
	"bytes"
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	// The SQLite driver, registered as "sqlite3".
	_ "github.com/mattn/go-sqlite3"
)

//go:embed schema.sql
var schemaSQL string

// SchemaVersion is the highest schema version this binary knows.
const SchemaVersion = 1

// timeLayout is the text form of datetime('now').
const timeLayout = "2006-01-02 15:04:05"

// specColumns are the tx columns of SPEC section 6; a tx table without all
// of them is not a ledger.
var specColumns = []string{"guid", "tx_code", "state", "rsp_code", "request", "response", "attempts", "updated_at"}

// sqliteMagic is the first 16 bytes of every SQLite 3 database file.
var sqliteMagic = []byte("SQLite format 3\x00")

// Option changes how Open and OpenExisting set up a Ledger.
type Option func(*config)

type config struct {
	busyTimeout time.Duration
	maxBatch    int
	readConns   int
	mustExist   bool
}

func defaultConfig() config {
	return config{busyTimeout: 10 * time.Second, maxBatch: 256, readConns: 4}
}

// WithBusyTimeout sets how long a connection waits for another process's
// write lock before failing with SQLITE_BUSY (default 10 s).
func WithBusyTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.busyTimeout = d
		}
	}
}

// WithMaxBatch caps how many operations one group commit takes (default
// 256). 1 turns group commit off (one COMMIT per operation).
func WithMaxBatch(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxBatch = n
		}
	}
}

// WithReadConns sets the size of the read pool (default 4).
func WithReadConns(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.readConns = n
		}
	}
}

// Ledger is an open ledger file. It is safe for concurrent use. Several
// Ledgers (in one process or several) may have the same file open.
type Ledger struct {
	path string
	cfg  config

	wdb   *sql.DB   // the writer's pool, one connection
	wconn *sql.Conn // that connection, owned by the writer goroutine
	rdb   *sql.DB   // read pool (query_only)

	// mu guards closed and the sends on ops: Close takes it exclusively,
	// so no sender is inside a send when ops is closed.
	mu       sync.RWMutex
	closed   bool
	isClosed atomic.Bool // the same flag, for the read paths
	ops      chan *op

	writerDone chan struct{}
	commits    atomic.Uint64

	closeOnce sync.Once
	closeErr  error
}

// Open opens the ledger at path, creating the file and its schema when the
// file is missing or empty (the relay). It never creates a directory. It
// refuses a file that is not a ledger: not SQLite, a SQLite database with
// tables but no tx table, a tx table lacking the SPEC columns, or a schema
// version newer than SchemaVersion. schema.sql is applied at every Open.
func Open(path string, opts ...Option) (*Ledger, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	return open(path, cfg)
}

// OpenExisting opens an existing ledger (the batch commands: a run on a
// wrong path is an incident, not a new empty ledger). A missing directory,
// a missing or empty file, or a file that is not a ledger (including a
// SQLite database without a tx table) is a clear error and nothing is
// created.
func OpenExisting(path string, opts ...Option) (*Ledger, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	cfg.mustExist = true
	return open(path, cfg)
}

func open(path string, cfg config) (*Ledger, error) {
	if path == "" {
		return nil, errors.New("ledger: open: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("ledger: open %s: %w", path, err)
	}
	if err := preflight(abs, cfg.mustExist); err != nil {
		return nil, fmt.Errorf("ledger: open %s: %w", path, err)
	}

	l := &Ledger{
		path:       abs,
		cfg:        cfg,
		ops:        make(chan *op, 4*cfg.maxBatch),
		writerDone: make(chan struct{}),
	}
	fail := func(err error) (*Ledger, error) {
		if l.wconn != nil {
			l.wconn.Close()
		}
		if l.wdb != nil {
			l.wdb.Close()
		}
		if l.rdb != nil {
			l.rdb.Close()
		}
		return nil, fmt.Errorf("ledger: open %s: %w", path, err)
	}

	mode := "rwc"
	if cfg.mustExist {
		mode = "rw"
	}
	l.wdb, err = sql.Open("sqlite3", l.dsn(mode, true))
	if err != nil {
		return fail(err)
	}
	// One connection, kept for the Ledger's life: the writer goroutine is
	// its only user, so there is nothing to pool.
	l.wdb.SetMaxOpenConns(1)
	l.wdb.SetMaxIdleConns(1)
	l.wdb.SetConnMaxLifetime(0)
	l.wdb.SetConnMaxIdleTime(0)
	ctx := context.Background()
	l.wconn, err = l.wdb.Conn(ctx)
	if err != nil {
		return fail(classifyOpenErr(err))
	}
	if err := applySchema(ctx, l.wconn, cfg.mustExist); err != nil {
		return fail(err)
	}

	l.rdb, err = sql.Open("sqlite3", l.dsn("rw", false))
	if err != nil {
		return fail(err)
	}
	l.rdb.SetMaxOpenConns(cfg.readConns)
	l.rdb.SetMaxIdleConns(cfg.readConns)
	if err := l.rdb.PingContext(ctx); err != nil {
		return fail(classifyOpenErr(err))
	}

	go l.writer()
	return l, nil
}

// preflight gives a clear error, before SQLite touches anything, for the
// mistakes an operator makes: a wrong directory, a wrong file, a directory
// given as the file.
func preflight(path string, mustExist bool) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("directory %s does not exist (not created)", dir)
	case err != nil:
		return err
	case !st.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}

	st, err = os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if mustExist {
			return fmt.Errorf("ledger file missing, not created: %w", os.ErrNotExist)
		}
		return nil
	case err != nil:
		return err
	case st.IsDir():
		return fmt.Errorf("is a directory, not a ledger file: %w", ErrNotLedger)
	case !st.Mode().IsRegular():
		return fmt.Errorf("not a regular file: %w", ErrNotLedger)
	case st.Size() == 0:
		if mustExist {
			// Opening it would turn it into an empty WAL database.
			return fmt.Errorf("empty file: %w", ErrNotLedger)
		}
		return nil // SQLite treats an empty file as an empty database
	}

	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, len(sqliteMagic))
	if _, err := io.ReadFull(f, head); err != nil || !bytes.Equal(head, sqliteMagic) {
		return fmt.Errorf("not a SQLite database: %w", ErrNotLedger)
	}
	return nil
}

// classifyOpenErr marks SQLite's "file is not a database" as ErrNotLedger.
func classifyOpenErr(err error) error {
	if err != nil && strings.Contains(err.Error(), "file is not a database") {
		return fmt.Errorf("%w: %w", ErrNotLedger, err)
	}
	return err
}

// dsn builds the SQLite URI for the file. The path is escaped so that '%',
// '?' and '#' in it stay part of the file name; SQLite ignores the driver's
// _-prefixed parameters and the driver ignores mode.
func (l *Ledger) dsn(mode string, writer bool) string {
	q := url.Values{}
	q.Set("mode", mode)
	q.Set("_busy_timeout", strconv.FormatInt(l.cfg.busyTimeout.Milliseconds(), 10))
	q.Set("_foreign_keys", "1")
	q.Set("_stmt_cache_size", "32")
	if writer {
		q.Set("_journal_mode", "WAL")
		q.Set("_synchronous", "FULL")
		q.Set("_txlock", "immediate")
	} else {
		// The read pool cannot write even by mistake.
		q.Set("_query_only", "1")
	}
	p := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(filepath.ToSlash(l.path))
	return "file:" + p + "?" + q.Encode()
}

// applySchema checks that the file is a ledger (or an empty database, when
// creating is allowed) and applies schema.sql, in one BEGIN IMMEDIATE
// transaction so that two processes starting at once serialise.
func applySchema(ctx context.Context, c *sql.Conn, mustExist bool) (err error) {
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		return classifyOpenErr(fmt.Errorf("begin: %w", err))
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()

	tables, err := userTables(ctx, tx)
	if err != nil {
		return classifyOpenErr(err)
	}
	if _, ok := tables["tx"]; !ok {
		if mustExist {
			return fmt.Errorf("no tx table: %w", ErrNotLedger)
		}
		if len(tables) > 0 {
			names := make([]string, 0, len(tables))
			for n := range tables {
				names = append(names, n)
			}
			sort.Strings(names)
			return fmt.Errorf("SQLite database with tables %s but no tx table: %w",
				strings.Join(names, ", "), ErrNotLedger)
		}
	} else if err := checkTxTable(ctx, tx); err != nil {
		return err
	}
	if _, ok := tables["schema_version"]; ok {
		var v sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_version`).Scan(&v); err != nil {
			return fmt.Errorf("read schema_version: %w", err)
		}
		if v.Int64 > SchemaVersion {
			return fmt.Errorf("schema version %d is newer than this binary's %d: %w",
				v.Int64, SchemaVersion, ErrNotLedger)
		}
	}

	if _, err := tx.ExecContext(ctx, schemaSQL); err != nil {
		return fmt.Errorf("apply schema.sql: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit schema: %w", err)
	}
	return nil
}

func userTables(ctx context.Context, tx *sql.Tx) (map[string]struct{}, error) {
	rows, err := tx.QueryContext(ctx,
		`SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\'`)
	if err != nil {
		return nil, fmt.Errorf("read tables: %w", err)
	}
	defer rows.Close()
	tables := map[string]struct{}{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("read tables: %w", err)
		}
		tables[n] = struct{}{}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read tables: %w", err)
	}
	return tables, nil
}

// checkTxTable refuses a tx table that lacks a SPEC column or whose guid is
// not the primary key (ON CONFLICT(guid) needs it).
func checkTxTable(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT name, pk FROM pragma_table_info('tx')`)
	if err != nil {
		return fmt.Errorf("read tx columns: %w", err)
	}
	defer rows.Close()
	cols := map[string]int{}
	for rows.Next() {
		var n string
		var pk int
		if err := rows.Scan(&n, &pk); err != nil {
			return fmt.Errorf("read tx columns: %w", err)
		}
		cols[strings.ToLower(n)] = pk
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read tx columns: %w", err)
	}
	var missing []string
	for _, c := range specColumns {
		if _, ok := cols[c]; !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("tx table lacks columns %s: %w", strings.Join(missing, ", "), ErrNotLedger)
	}
	if cols["guid"] != 1 {
		return fmt.Errorf("tx.guid is not the primary key: %w", ErrNotLedger)
	}
	return nil
}

// Path is the absolute path of the ledger file.
func (l *Ledger) Path() string { return l.path }

// Commits is the number of group commits (successful write transactions of
// the writer) since Open, Ping's empty ones included. Benchmarks divide it
// by the number of operations: 2 per transfer would mean no grouping.
func (l *Ledger) Commits() uint64 { return l.commits.Load() }

// Ping reports whether the ledger is usable, for a readiness probe: a read
// on the read pool, and a round trip through the writer, which must get the
// write lock (BEGIN IMMEDIATE) within the busy timeout. It writes nothing,
// so its COMMIT needs no fsync.
func (l *Ledger) Ping(ctx context.Context) error {
	if l.isClosed.Load() {
		return fmt.Errorf("ledger: ping: %w", ErrClosed)
	}
	var n int
	if err := l.rdb.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM tx LIMIT 1)`).Scan(&n); err != nil {
		return fmt.Errorf("ledger: ping: read: %w", err)
	}
	err := l.do(ctx, func(tx *sql.Tx) error {
		return tx.QueryRow(`SELECT COUNT(*) FROM (SELECT 1 FROM tx LIMIT 1)`).Scan(&n)
	})
	if err != nil {
		return fmt.Errorf("ledger: ping: write path: %w", err)
	}
	return nil
}

// Close stops accepting operations, lets the writer finish every operation
// already queued (each gets its result or an error), then closes the
// connections. It waits for the writer goroutine to exit. Calling it again
// returns the first call's result.
func (l *Ledger) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.isClosed.Store(true)
		close(l.ops)
		l.mu.Unlock()
		<-l.writerDone

		var errs []error
		if err := l.wconn.Close(); err != nil {
			errs = append(errs, err)
		}
		if err := l.wdb.Close(); err != nil {
			errs = append(errs, err)
		}
		if err := l.rdb.Close(); err != nil {
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			l.closeErr = fmt.Errorf("ledger: close %s: %w", l.path, err)
		}
	})
	return l.closeErr
}

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func parseTime(s sql.NullString) (time.Time, error) {
	if !s.Valid || s.String == "" {
		return time.Time{}, nil
	}
	t, err := time.ParseInLocation(timeLayout, s.String, time.UTC)
	if err != nil {
		return time.Time{}, fmt.Errorf("bad updated_at %q: %w", s.String, err)
	}
	return t, nil
}
