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
	"sync/atomic"

	// The SQLite driver, registered as "sqlite3".
	_ "github.com/mattn/go-sqlite3"
)

//go:embed schema.sql
var schemaSQL string

// sqliteMagic is the first 16 bytes of every SQLite 3 database file.
var sqliteMagic = []byte("SQLite format 3\x00")

// sqliteStore is a ledger file: one writer goroutine owning the only write
// connection (group commit, writer.go) and a pool of read-only connections.
// See the package doc for its settings.
type sqliteStore struct {
	path string
	cfg  config

	wdb   *sql.DB       // the writer's pool, one connection
	wconn *sql.Conn     // that connection, owned by the writer goroutine
	w     *sqliteWriter // the driver's connection under wconn, while the writer runs
	wErr  error         // why there is none (never, with this package's driver)
	tx    sqliteTx      // the writer's statements for the op it runs (txFor)
	// pending is the writer's room for a transaction's history entries
	// (appendHistory), kept from one to the next.
	pending []pending
	rdb     *sql.DB // read pool (query_only)
	// readOnly: opened by OpenReadOnly, with no writer.
	readOnly bool

	queue      // the writer's
	writerDone chan struct{}
	ncommits   atomic.Uint64
	batch      sqliteBatch // the writer's, begun by startBatch
	chain      *chain      // the writer's history chain
}

func openSQLite(path string, cfg config) (*sqliteStore, string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, "", fmt.Errorf("ledger: open %s: %w", path, err)
	}
	if err := preflight(abs, cfg.mustExist); err != nil {
		return nil, "", fmt.Errorf("ledger: open %s: %w", path, err)
	}
	if !cfg.mustExist {
		if err := createPrivate(abs); err != nil {
			return nil, "", fmt.Errorf("ledger: open %s: %w", path, err)
		}
	}

	s := &sqliteStore{
		path:       abs,
		cfg:        cfg,
		queue:      newQueue(4 * cfg.maxBatch),
		writerDone: make(chan struct{}),
		chain:      cfg.chain,
	}
	if cfg.readOnly {
		return s.openReadOnly(path)
	}
	fail := func(err error) (*sqliteStore, string, error) {
		if s.wconn != nil {
			s.wconn.Close()
		}
		if s.wdb != nil {
			s.wdb.Close()
		}
		if s.rdb != nil {
			s.rdb.Close()
		}
		return nil, "", fmt.Errorf("ledger: open %s: %w", path, err)
	}

	mode := "rwc"
	if cfg.mustExist {
		mode = "rw"
	}
	s.wdb, err = sql.Open("sqlite3", s.dsn(mode, true))
	if err != nil {
		return fail(err)
	}
	// One connection, kept for the Ledger's life: the writer goroutine is
	// its only user, so there is nothing to pool.
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	s.wdb.SetConnMaxIdleTime(0)
	ctx := context.Background()
	s.wconn, err = s.wdb.Conn(ctx)
	if err != nil {
		return fail(classifyOpenErr(err))
	}
	if err := applySchema(ctx, s.wconn, cfg.mustExist); err != nil {
		return fail(err)
	}
	// Only the writer commits, so only its connection checkpoints and
	// cuts the WAL back (the package doc says why at these sizes).
	if err := s.boundWAL(ctx); err != nil {
		return fail(err)
	}

	s.rdb, err = sql.Open("sqlite3", s.dsn("rw", false))
	if err != nil {
		return fail(err)
	}
	s.rdb.SetMaxOpenConns(cfg.readConns)
	s.rdb.SetMaxIdleConns(cfg.readConns)
	if err := s.rdb.PingContext(ctx); err != nil {
		return fail(classifyOpenErr(err))
	}

	go s.writer()
	return s, abs, nil
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

// createPrivate creates the ledger file, if it does not exist, readable
// and writable by its owner only, whatever the umask: it will hold account
// numbers, amounts and balances (SPEC 6). SQLite gives the -wal and -shm
// files it creates beside it the database file's permissions, so they are
// private too. An existing file keeps the permissions it has.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	// The umask can only take bits away from 0o600; a umask that took the
	// owner's write bit would leave a ledger nobody can write.
	return f.Chmod(0o600)
}

// classifyOpenErr marks SQLite's "file is not a database" as ErrNotLedger.
func classifyOpenErr(err error) error {
	if err != nil && strings.Contains(err.Error(), "file is not a database") {
		return fmt.Errorf("%w: %w", ErrNotLedger, err)
	}
	return err
}

// walCheckpointPages is how many pages the WAL holds at most before a
// COMMIT copies them into the database file (doc.go), where the file
// system is large enough (walPages).
const walCheckpointPages = 4000

// walShare is the most of its file system the WAL may fill before it is
// checkpointed: one part in walShare.
const walShare = 16

// walFrameHeader and walHeader are the bytes a WAL adds to each page it
// holds and at its start.
const (
	walFrameHeader = 24
	walHeader      = 32
)

// walPages is the checkpoint threshold, in pages, for a ledger on a file
// system of fsBytes (0: unknown) with pages of pageSize bytes:
// walCheckpointPages, or fewer so that the WAL takes at most a
// walShare-th of the file system. A checkpoint needs room to copy the
// WAL's pages into the database file, which grows by as many pages as the
// WAL holds new ones; a WAL allowed as much as the disk holds (16 MB on a
// 16 MiB file system) takes that room itself, and then no commit succeeds
// again: the checkpoint fails for want of space, so the WAL never starts
// again from its beginning, and every commit needs more WAL.
func walPages(fsBytes, pageSize int64) int64 {
	n := int64(walCheckpointPages)
	if fsBytes > 0 && pageSize > 0 {
		n = min(n, fsBytes/walShare/(pageSize+walFrameHeader))
	}
	return max(n, 1)
}

// boundWAL sets the writer's checkpoint threshold (walPages) and the size
// the WAL file is cut back to after a checkpoint: twice the threshold's
// bytes. A WAL file keeps the size it once reached, however little of it
// is in use; twice the threshold leaves alone the few pages the last
// batch before each checkpoint adds past it, and takes back what a
// transaction far larger than the threshold (or a checkpoint held off by
// a reader) made the file grow to.
func (s *sqliteStore) boundWAL(ctx context.Context) error {
	var pageSize int64
	if err := s.wconn.QueryRowContext(ctx, "PRAGMA page_size").Scan(&pageSize); err != nil {
		return fmt.Errorf("read page_size: %w", err)
	}
	pages := walPages(fileSystemSize(filepath.Dir(s.path)), pageSize)
	limit := 2*pages*(pageSize+walFrameHeader) + walHeader
	for _, q := range []string{
		"PRAGMA wal_autocheckpoint = " + strconv.FormatInt(pages, 10),
		"PRAGMA journal_size_limit = " + strconv.FormatInt(limit, 10),
	} {
		if _, err := s.wconn.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// dsn builds the SQLite URI for the file. The path is escaped so that '%',
// '?' and '#' in it stay part of the file name; SQLite ignores the driver's
// _-prefixed parameters and the driver ignores mode.
func (s *sqliteStore) dsn(mode string, writer bool) string {
	q := url.Values{}
	q.Set("mode", mode)
	q.Set("_busy_timeout", strconv.FormatInt(s.cfg.busyTimeout.Milliseconds(), 10))
	q.Set("_foreign_keys", "1")
	q.Set("_stmt_cache_size", "32")
	q.Set("_mutex", "no")
	if writer {
		q.Set("_journal_mode", "WAL")
		q.Set("_synchronous", "FULL")
		q.Set("_txlock", "immediate")
	} else {
		// The read pool cannot write even by mistake.
		q.Set("_query_only", "1")
	}
	p := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(filepath.ToSlash(s.path))
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

	tables, err := checkSQLiteLedger(ctx, tx, mustExist)
	if err != nil {
		return err
	}

	for _, c := range addedColumns {
		if _, ok := tables[c.table]; !ok {
			continue // created by schema.sql, with the column
		}
		var has int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ?`, c.table, c.column).Scan(&has); err != nil {
			return fmt.Errorf("read %s columns: %w", c.table, err)
		}
		if has == 0 {
			if _, err := tx.ExecContext(ctx, `ALTER TABLE `+c.table+` ADD COLUMN `+c.column+` `+c.sqlite); err != nil {
				return fmt.Errorf("add %s.%s: %w", c.table, c.column, err)
			}
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

// checkSQLiteLedger refuses what is not a ledger (or, when mustExist is
// false, not an empty database either) and returns the database's tables
// and its highest schema version (0 when it has none).
func checkSQLiteLedger(ctx context.Context, tx *sql.Tx, mustExist bool) (map[string]struct{}, error) {
	tables, _, err := sqliteLedgerVersion(ctx, tx, mustExist)
	return tables, err
}

func sqliteLedgerVersion(ctx context.Context, tx *sql.Tx, mustExist bool) (map[string]struct{}, int64, error) {
	tables, err := userTables(ctx, tx)
	if err != nil {
		return nil, 0, classifyOpenErr(err)
	}
	if _, ok := tables["tx"]; !ok {
		if mustExist {
			return nil, 0, fmt.Errorf("no tx table: %w", ErrNotLedger)
		}
		if len(tables) > 0 {
			names := make([]string, 0, len(tables))
			for n := range tables {
				names = append(names, n)
			}
			sort.Strings(names)
			return nil, 0, fmt.Errorf("SQLite database with tables %s but no tx table: %w",
				strings.Join(names, ", "), ErrNotLedger)
		}
	} else if err := checkTxTable(ctx, tx); err != nil {
		return nil, 0, err
	}
	var version int64
	if _, ok := tables["schema_version"]; ok {
		var v sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_version`).Scan(&v); err != nil {
			return nil, 0, fmt.Errorf("read schema_version: %w", err)
		}
		if v.Int64 > SchemaVersion {
			return nil, 0, fmt.Errorf("schema version %d is newer than this binary's %d: %w",
				v.Int64, SchemaVersion, ErrNotLedger)
		}
		version = v.Int64
	}
	return tables, version, nil
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

func (s *sqliteStore) dialect() *dialect { return sqliteDialect }

func (s *sqliteStore) commits() uint64 { return s.ncommits.Load() }

// ping reads on the read pool and makes a round trip through the writer,
// which must get the write lock (BEGIN IMMEDIATE) within the busy timeout.
// It writes nothing, so its COMMIT needs no fsync.
func (s *sqliteStore) ping(ctx context.Context) error {
	var n int
	if err := s.rdb.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM tx LIMIT 1)`).Scan(&n); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if s.readOnly {
		return nil
	}
	err := s.do(ctx, operation{run: opFunc(func(tx stmts) error {
		return tx.queryRow(`SELECT COUNT(*) FROM (SELECT 1 FROM tx LIMIT 1)`).Scan(&n)
	})})
	if err != nil {
		return fmt.Errorf("write path: %w", err)
	}
	return nil
}

// close stops accepting operations, lets the writer finish every operation
// already queued, then closes the connections.
func (s *sqliteStore) close() error {
	s.shut()
	<-s.writerDone

	var errs []error
	if s.wconn != nil {
		if err := s.wconn.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.wdb != nil {
		if err := s.wdb.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.rdb.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// sqliteTx runs an operation's statements in the writer's transaction,
// on the writer's own connection (sqliteWriter).
type sqliteTx struct {
	w *sqliteWriter
	o *op // records the history entries
}

func (t sqliteTx) change(q string, args []any, entry func(scanner) (pending, error)) (int64, error) {
	rows, err := t.w.query(q, args)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	return recordEach(rows, t.o, entry)
}

func (t sqliteTx) changeOne(q string, args []any, p pending) (int64, error) {
	n, err := t.w.exec(q, args)
	if err != nil {
		return 0, err
	}
	return recordOne(n, t.o, p)
}

func (t sqliteTx) note(p pending) { t.o.entries = append(t.o.entries, p) }

func (t sqliteTx) exec(q string, args ...any) (int64, error) {
	if err := notTxWrite(q); err != nil {
		return 0, err
	}
	return t.w.exec(q, args)
}

func (t sqliteTx) queryRow(q string, args ...any) scanner {
	return rawRow{t.w, q, args}
}

// rerun: the writer never runs an operation again after an unknown
// outcome (SQLite reports every failure of its own file).
func (t sqliteTx) rerun() bool { return false }

// sqliteRow maps sql.ErrNoRows to errNoRows.
type sqliteRow struct{ r *sql.Row }

func (r sqliteRow) Scan(dest ...any) error {
	err := r.r.Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return errNoRows
	}
	return err
}

// sqliteReader runs queries on the read pool, or in one read transaction.
type sqliteReader struct {
	q interface {
		QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
		QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
	}
}

func (s *sqliteStore) read() querier { return sqliteReader{s.rdb} }

// snapshot: a read transaction gives the queries one consistent snapshot
// (WAL).
func (s *sqliteStore) snapshot(ctx context.Context, fn func(querier) error) error {
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(sqliteReader{tx})
}

func (r sqliteReader) query(ctx context.Context, q string, args ...any) (rowSet, error) {
	rows, err := r.q.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return sqliteRows{rows}, nil
}

func (r sqliteReader) queryRow(ctx context.Context, q string, args ...any) scanner {
	return sqliteRow{r.q.QueryRowContext(ctx, q, args...)}
}

type sqliteRows struct{ *sql.Rows }

func (r sqliteRows) Close() { r.Rows.Close() }
