package ledger

import (
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// SchemaVersion is the highest schema version this binary knows (both
// stores).
// Version 2 added the history (SPEC 6b).
const SchemaVersion = 3

// timeLayout is the text form of SQLite's datetime('now').
const timeLayout = "2006-01-02 15:04:05"

// specColumns are the tx columns of SPEC section 6; a tx table without all
// of them is not a ledger.
var specColumns = []string{"guid", "tx_code", "state", "rsp_code", "request", "response", "attempts", "updated_at"}

// addedColumns are the columns added to a table after its first release,
// as each store declares them (the same as in its schema file's CREATE
// TABLE). Open adds those missing from an older ledger's tables before it
// runs the schema file, whose indexes may use them; only when missing,
// because ALTER TABLE ADD COLUMN is not idempotent and, on PostgreSQL,
// locks the table against every relay even when it finds the column there.
var addedColumns = []struct{ table, column, sqlite, postgres string }{
	{"tx", "prev_rsp_code", "TEXT", "text"},
	{"tx", "claim_token", "TEXT NOT NULL DEFAULT ''", "text NOT NULL DEFAULT ''"},
	{"tx", "hist_key", "INTEGER", "bigint"},
	{"history", "hist_key", "INTEGER", "bigint"},
}

// Option changes how Open and OpenExisting set up a Ledger.
type Option func(*config)

type config struct {
	mustExist bool
	readOnly  bool // OpenReadOnly
	actor     Actor
	chain     *chain // the history chain, made by open from actor

	// SQLite
	busyTimeout time.Duration
	maxBatch    int
	readConns   int

	// Both stores: how long the writer waits for company for an outcome
	// nobody waits for (see runWriter).
	linger time.Duration

	// PostgreSQL
	poolSize         int
	statementTimeout time.Duration
	lockTimeout      time.Duration
	retryFor         time.Duration // a wait (Claim, Finish): how long to retry what never reached the database
	retryLaterFor    time.Duration // the same for FinishLater, which nobody waits for
	// lookup, when set (tests), resolves the URL's host names, so that a
	// name other than localhost can reach a test server on the loopback.
	lookup pgconn.LookupFunc
}

func defaultConfig() config {
	return config{
		busyTimeout: 10 * time.Second, maxBatch: 256, readConns: 4, linger: outcomeLinger,
		poolSize: 8, statementTimeout: 10 * time.Second, lockTimeout: 5 * time.Second,
		retryFor: 2 * time.Second, retryLaterFor: 30 * time.Second,
	}
}

// WithBusyTimeout sets how long a SQLite connection waits for another
// process's write lock before failing with SQLITE_BUSY (default 10 s).
func WithBusyTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.busyTimeout = d
		}
	}
}

// WithMaxBatch caps how many operations one group commit takes (default
// 256), on both stores. 1 turns group commit off (one COMMIT per
// operation).
func WithMaxBatch(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxBatch = n
		}
	}
}

// WithReadConns sets the size of the SQLite read pool (default 4).
func WithReadConns(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.readConns = n
		}
	}
}

// WithPoolSize sets how many connections a PostgreSQL ledger opens at most
// (default 8): the writer uses one at a time (two on its slow path), reads
// the others.
func WithPoolSize(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.poolSize = n
		}
	}
}

// WithStatementTimeout bounds each PostgreSQL statement, on the server
// (statement_timeout) and, a little later, on the client (default 10 s).
func WithStatementTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.statementTimeout = d
		}
	}
}

// WithRetry sets how long PostgreSQL operations are tried again when they
// certainly wrote nothing (no connection, a connection lost before the
// COMMIT): wait for operations a caller waits for (Claim, Finish, …;
// default 2 s), later for outcomes queued by FinishLater (default 30 s, so
// that a database restart loses none).
func WithRetry(wait, later time.Duration) Option {
	return func(c *config) {
		if wait >= 0 {
			c.retryFor = wait
		}
		if later >= 0 {
			c.retryLaterFor = later
		}
	}
}

// Ledger is an open ledger: a SQLite file or a PostgreSQL database. It is
// safe for concurrent use. Several Ledgers (in one process or several, on
// one host or several for PostgreSQL) may have the same ledger open.
type Ledger struct {
	path     string // the file's absolute path, or the URL without its password
	st       store
	chain    *chain // the history chain this Ledger's writer appends to
	isClosed atomic.Bool
	errs     [numOps]atomic.Uint64
	// late and conflicts count Finish's late answers recorded over an
	// early settle, and those refused because the row was re-claimed.
	late, conflicts atomic.Uint64
	// tokenPrefix (random, per Open) and claims make each claim's token
	// (newClaimToken).
	tokenPrefix string
	claims      atomic.Uint64
	tokens      claimTokens

	closeOnce sync.Once
	closeErr  error
}

// Open opens the ledger named by db, creating what is missing (the relay):
// a SQLite file path, or a postgres:// or postgresql:// URL (then the
// database must exist; its tables are created). schema.sql (or
// schema_postgres.sql) is applied at every Open. It refuses what is not a
// ledger: a file that is not SQLite, a SQLite database with tables but no
// tx table, a tx table lacking the SPEC columns, a schema version newer
// than SchemaVersion.
func Open(db string, opts ...Option) (*Ledger, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	return open(db, cfg)
}

// OpenExisting opens an existing ledger (the batch commands: a run on a
// wrong path is an incident, not a new empty ledger). A missing directory,
// a missing or empty file, a database without a tx table, or anything
// that is not a ledger is a clear error and nothing is created.
func OpenExisting(db string, opts ...Option) (*Ledger, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	cfg.mustExist = true
	return open(db, cfg)
}

func open(db string, cfg config) (*Ledger, error) {
	if err := CheckName(db); err != nil {
		return nil, fmt.Errorf("ledger: open: %w", err)
	}
	var (
		st   store
		path string
		err  error
	)
	cfg.chain = newChain(cfg.actor)
	if IsURL(db) {
		st, path, err = openPostgres(db, cfg)
	} else {
		st, path, err = openSQLite(db, cfg)
	}
	if err != nil {
		return nil, err
	}
	return &Ledger{path: path, st: st, chain: cfg.chain, tokenPrefix: rand.Text() + "."}, nil
}

// keyValue matches a libpq key=value connection string ("host=db1
// dbname=ledger"): a word and '=' at its start or after a space.
var keyValue = regexp.MustCompile(`(^|\s)[A-Za-z_]+\s*=`)

// CheckName refuses a --db value that names no ledger: an empty one, and one
// that looks like a libpq key=value connection string. Taken for a file
// name, the latter would give relays meant to share a PostgreSQL ledger a
// private SQLite file each, and a retry through another relay would be
// posted again (SPEC 6).
func CheckName(db string) error {
	switch {
	case db == "":
		return errors.New("empty path")
	case !IsURL(db) && keyValue.MatchString(db):
		// Not echoed: it may hold a password.
		return errors.New("the value looks like a key=value connection string (host=… dbname=…): give PostgreSQL as a URL, postgres://user@host:5432/dbname?sslmode=…, or a SQLite file path without '='")
	}
	return nil
}

// Path is the ledger's absolute file path, or its URL without the password.
func (l *Ledger) Path() string { return l.path }

// Store names the kind of store: "sqlite" or "postgres".
func (l *Ledger) Store() string { return l.st.dialect().name }

// Commits is the number of group commits (the writer's transactions, Ping's
// empty ones included) since Open, on either store: benchmarks divide it by
// the number of operations, and 2 per transfer would mean no grouping. On
// SQLite each is one fsync; on PostgreSQL the server may flush several
// relays' commits at once (pg_stat_wal counts its flushes).
func (l *Ledger) Commits() uint64 { return l.st.commits() }

// The operations whose failures Errors counts.
const (
	opClaim = iota
	opFinish
	opTransition
	opReclaim
	opPurge
	opRead
	opPing
	numOps
)

// ErrorOps names the operations of Errors, in its order.
var ErrorOps = [numOps]string{"claim", "finish", "transition", "reclaim", "purge", "read", "ping"}

// countError counts err against op unless it is a refusal or a caller's
// own cancellation, which say nothing about the database.
func (l *Ledger) countError(op int, err error) {
	if err == nil || errors.Is(err, ErrStateChanged) || errors.Is(err, ErrClosed) ||
		errors.Is(err, context.Canceled) {
		return
	}
	l.errs[op].Add(1)
}

// Errors returns how many times each operation failed since Open (for
// lhrelay_ledger_errors_total), indexed like ErrorOps. Refusals
// (ErrStateChanged) and cancelled calls are not failures.
func (l *Ledger) Errors() [numOps]uint64 {
	var out [numOps]uint64
	for i := range out {
		out[i] = l.errs[i].Load()
	}
	return out
}

// LateAnswers is how many outcomes were recorded over a row settled FAILED
// while their call was under way (Finish), since Open.
func (l *Ledger) LateAnswers() uint64 { return l.late.Load() }

// Conflicts is how many outcomes found their row re-claimed since their
// call was made (ErrReclaimed), since Open: each is a transfer that may
// have been posted twice (lhrelay_ledger_conflicts_total).
func (l *Ledger) Conflicts() uint64 { return l.conflicts.Load() }

// Ping reports whether the ledger is usable, for a readiness probe: a read,
// and a round trip through the writer (SQLite: which must get the write
// lock within the busy timeout; PostgreSQL: on a connection to a primary
// that accepts writes). It writes nothing.
func (l *Ledger) Ping(ctx context.Context) error {
	if l.isClosed.Load() {
		return fmt.Errorf("ledger: ping: %w", ErrClosed)
	}
	if err := l.st.ping(ctx); err != nil {
		l.countError(opPing, err)
		return fmt.Errorf("ledger: ping: %w", err)
	}
	return nil
}

// Close stops accepting operations, lets every operation already queued
// finish (each gets its result or an error), then closes the connections.
// Calling it again returns the first call's result.
func (l *Ledger) Close() error {
	l.closeOnce.Do(func() {
		l.isClosed.Store(true)
		if err := l.st.close(); err != nil {
			l.closeErr = fmt.Errorf("ledger: close %s: %w", l.path, err)
		}
	})
	return l.closeErr
}

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }
