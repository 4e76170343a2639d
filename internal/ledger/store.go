package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A store is where the rows live: a SQLite file (sqliteStore) or a
// PostgreSQL database (pgStore). The Ledger's state machine (claim.go) and
// its reads (read.go) are written once, against this interface, in SQL that
// both dialects accept ('?' placeholders, CURRENT_TIMESTAMP); what differs
// between the two (how statements reach the database, how commits are
// grouped, how connections are pooled, how time is stored) is the store's.
type store interface {
	// do runs one operation of the state machine and returns once its
	// write (if any) is committed, or has failed. Operations on one GUID
	// run in the order they were issued, including those queued by
	// enqueue: a claim issued after an outcome was queued sees that
	// outcome. What a cancelled ctx means is the store's (see the package
	// doc); it never leaves a half-run operation.
	do(ctx context.Context, o operation) error
	// enqueue queues o and returns; then gets its result once it has
	// committed or failed. ctx bounds only the wait for room. On error
	// nothing was queued and then is never called.
	enqueue(ctx context.Context, o operation, then completer) error
	// read is for queries outside any write: each runs on its own.
	read() querier
	// snapshot runs fn's queries in one consistent read snapshot.
	snapshot(ctx context.Context, fn func(querier) error) error
	dialect() *dialect
	// ping checks that reads and writes can reach the database.
	ping(ctx context.Context) error
	// commits counts the store's committed write transactions.
	commits() uint64
	// close waits for every queued operation, then closes the connections.
	close() error
	// replication is Ledger.Replication.
	replication(ctx context.Context) (Replication, error)
	// tryExclusive is Ledger.TryExclusive.
	tryExclusive(ctx context.Context, name string) (release func(), ok bool, err error)
}

// An operation is one step of the state machine for a store to run.
type operation struct {
	guid string // the row it works on; "" for none (purge, ping)
	// guidArg, when set, is guid as its statements' argument: its
	// history entries use the same box.
	guidArg any
	// keyArg, when set, is the hist_key its claim inserts, boxed for its
	// statement: its history entry uses the same box.
	keyArg any
	// run is its statements: an opFunc, or for the operations of every
	// transfer a pooled struct with a method (claimRun, finishRun), which
	// costs no closure.
	run runner
	// rerunnable: run may run again after a failure whose outcome is
	// unknown (the connection was lost once the statement had been sent),
	// because it finds out itself whether its first run wrote
	// (stmts.rerun). Only transitions are: a claim run again would find
	// its own row and take it for somebody else's.
	rerunnable bool
}

// An opFunc is one operation of the state machine: its statements, run in
// order through s. Every operation makes at most one write, as its last
// statement, so running it again after a failure that wrote nothing is
// safe; it stores its result in variables its caller's closure captured.
type opFunc func(s stmts) error

// A completer is told the result of an operation queued without waiting
// (enqueue), on the writer goroutine.
type completer interface{ completed(err error) }

// A runner is an operation of the state machine: an opFunc, or a pooled
// struct (the operations of every transfer), whose method costs no
// closure.
type runner interface{ run(s stmts) error }

func (f opFunc) run(s stmts) error { return f(s) }

// stmts runs one write operation's statements, written with '?'
// placeholders.
type stmts interface {
	// change runs a statement that changes tx rows (INSERT, UPDATE or
	// DELETE) with a RETURNING clause: one result row per row changed,
	// which entry turns into that change's history entry. So every change
	// of a row has its entry, in the same transaction, by construction
	// (SPEC 6b); the writer chains the entries before its COMMIT. It
	// returns how many rows changed.
	change(q string, args []any, entry func(scanner) (pending, error)) (int64, error)
	// changeOne runs a statement that changes at most one tx row and has
	// no RETURNING clause; if it changed one, p is that change's entry.
	// For changes whose entry is known beforehand (a claim's insert, or a
	// transition whose row was read first): a RETURNING clause costs SQLite
	// a temporary table per statement.
	changeOne(q string, args []any, p pending) (int64, error)
	// note records a history entry that changes no row (a purge of
	// history).
	note(p pending)
	// exec runs a statement that changes no tx row (the history tables'
	// own upkeep: ledger copy, purge of history) and returns the number of
	// rows it affected. A change of tx rows goes through change.
	exec(q string, args ...any) (int64, error)
	// queryRow runs a statement that returns at most one row; a missing
	// row is errNoRows from Scan.
	queryRow(q string, args ...any) scanner
	// rerun reports whether an earlier run of this operation failed after
	// its statement was sent: its write may have landed.
	rerun() bool
}

// txWrite matches a statement that writes tx rows.
var txWrite = regexp.MustCompile(`(?is)^\s*(insert\s+into|update|delete\s+from)\s+tx\b`)

// notTxWrite refuses, in every store's exec, a statement that writes tx
// rows: those go through change, which writes their history.
func notTxWrite(q string) error {
	if txWrite.MatchString(q) {
		return errors.New("ledger: a change of tx rows must go through change, which writes its history")
	}
	return nil
}

// recordOne records p for o when the statement changed one row; more than
// one is a bug of the statement (it must name its row by key).
func recordOne(n int64, o *op, p pending) (int64, error) {
	switch {
	case n > 1:
		return n, fmt.Errorf("ledger: a statement meant to change one row changed %d", n)
	case n == 1:
		o.entries = append(o.entries, p)
	}
	return n, nil
}

// recordEach records, for o, the entry that entry reads from each row a
// changing statement returned (its RETURNING clause); n is how many.
func recordEach(rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}, o *op, entry func(scanner) (pending, error)) (int64, error) {
	var n int64
	for rows.Next() {
		p, err := entry(rows)
		if err != nil {
			return n, err
		}
		o.entries = append(o.entries, p)
		n++
	}
	return n, rows.Err()
}

// querier runs read queries.
type querier interface {
	query(ctx context.Context, q string, args ...any) (rowSet, error)
	queryRow(ctx context.Context, q string, args ...any) scanner
}

type scanner interface{ Scan(dest ...any) error }

// rowSet is the part of *sql.Rows and pgx.Rows the reads use.
type rowSet interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// The nullable column types the shared code scans into; both drivers fill
// a database/sql Scanner.
type (
	nullString = sql.NullString
	nullInt    = sql.NullInt64
)

// errNoRows is what both stores' scanners return for a missing row.
var errNoRows = errors.New("no rows in result set")

// A dialect is what the shared SQL needs to know about a store: how a
// point in time is compared with updated_at (SQLite: text at whole
// seconds; PostgreSQL: timestamptz), and how purges share rows. (The
// PostgreSQL store numbers the '?' placeholders itself.)
type dialect struct {
	name string
	// timeArg is a Row's UpdatedAt as a query argument (Scan's cursor).
	timeArg func(t time.Time) any
	// atOrBefore is the condition and argument for "updated_at at or
	// before t, at whole seconds" (Filter.UpdatedBefore).
	atOrBefore func(t time.Time) (string, any)
	// olderThan is the condition and argument for "updated_at at least
	// age before the database's clock now" (Filter.OlderThan): the
	// database's clock, the one that stamped updated_at, never the
	// process's (SPEC 6a).
	olderThan func(age time.Duration) (string, any)
	// strictlyOlderThan is the same for "more than age before now"
	// (PurgeDone).
	strictlyOlderThan func(age time.Duration) (string, any)
	// skipLocked ends a sub-select of rows to delete: with several
	// processes purging one database, each takes rows nobody else holds.
	skipLocked string
	// atArg is a history entry's At as a query argument.
	atArg func(t time.Time) any
	// historyOlderThan is the condition and argument for "a history entry
	// more than age old, by the database's clock".
	historyOlderThan func(age time.Duration) (string, any)
	// readsBefore: a transition reads the row's rsp_code and attempts
	// first and changes it with changeOne, instead of one UPDATE …
	// RETURNING. On SQLite RETURNING runs through a temporary table per
	// statement (measured: the UPDATE's time four times over), while the
	// writer holds the only write lock, so the row cannot change between
	// the two. PostgreSQL returns them at no cost, under the row's lock,
	// where a read first would be a round trip more.
	readsBefore bool
}

var sqliteDialect = &dialect{
	name:       "sqlite",
	timeArg:    func(t time.Time) any { return formatTime(t) },
	atOrBefore: func(t time.Time) (string, any) { return "updated_at <= ?", formatTime(t) },
	// datetime('now', '-N seconds') is the same text form as updated_at.
	// updated_at holds whole seconds (SPEC 6): a row stamped second S was
	// changed at some instant in [S, S+1), so only S < the second of
	// now - age shows an age of at least age; S equal to it would settle
	// a row up to a second younger than --min-age or --stale-sent. Rounding
	// up, a row is settled up to a second late, never early.
	olderThan:         func(age time.Duration) (string, any) { return "updated_at < datetime('now', ?)", sqliteAgo(age) },
	strictlyOlderThan: func(age time.Duration) (string, any) { return "updated_at < datetime('now', ?)", sqliteAgo(age) },
	atArg:             func(t time.Time) any { return t.UTC().Format(atLayout) },
	// strftime's %f has milliseconds, at microseconds: the text
	// comparison is right to the millisecond.
	historyOlderThan: func(age time.Duration) (string, any) {
		return "at < strftime('%Y-%m-%d %H:%M:%f', 'now', ?)", sqliteAgo(age)
	},
	readsBefore: true,
}

// sqliteAgo is datetime()'s modifier for age ago.
func sqliteAgo(age time.Duration) string {
	return "-" + strconv.FormatFloat(age.Seconds(), 'f', 3, 64) + " seconds"
}

// PostgreSQL keeps microseconds; "at or before t at whole seconds" is
// "before the second after t's", which stays a range of the index.
var postgresDialect = &dialect{
	name:    "postgres",
	timeArg: func(t time.Time) any { return t },
	atOrBefore: func(t time.Time) (string, any) {
		return "updated_at < ?", t.Truncate(time.Second).Add(time.Second)
	},
	// CURRENT_TIMESTAMP minus a constant is computed once per statement:
	// the condition stays a range of the (state, updated_at) index.
	olderThan: func(age time.Duration) (string, any) {
		return "updated_at <= CURRENT_TIMESTAMP - make_interval(secs => ?)", age.Seconds()
	},
	strictlyOlderThan: func(age time.Duration) (string, any) {
		return "updated_at < CURRENT_TIMESTAMP - make_interval(secs => ?)", age.Seconds()
	},
	skipLocked: " FOR UPDATE SKIP LOCKED",
	atArg:      func(t time.Time) any { return t.UTC() },
	historyOlderThan: func(age time.Duration) (string, any) {
		return "at < CURRENT_TIMESTAMP - make_interval(secs => ?)", age.Seconds()
	},
}

// dollarPlaceholders numbers the '?' of q as $1, $2, …; the statements of
// this package hold no '?' inside a literal. The same few statements go
// through it for every operation, so it remembers what it numbered (up to
// dollarKept texts; the texts are the package's own, a few dozen).
func dollarPlaceholders(q string) string {
	dollarMu.RLock()
	d, ok := dollarDone[q]
	dollarMu.RUnlock()
	if ok {
		return d
	}
	d = numberPlaceholders(q)
	dollarMu.Lock()
	if len(dollarDone) < dollarKept {
		dollarDone[q] = d
	}
	dollarMu.Unlock()
	return d
}

const dollarKept = 512

var (
	dollarMu   sync.RWMutex
	dollarDone = map[string]string{}
)

func numberPlaceholders(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// dbTime scans updated_at from either store: SQLite's text, PostgreSQL's
// timestamptz, or NULL (the zero time).
type dbTime struct{ t time.Time }

func (d *dbTime) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		d.t = time.Time{}
	case time.Time:
		d.t = v.UTC()
	case string:
		return d.parse(v)
	case []byte:
		return d.parse(string(v))
	default:
		return fmt.Errorf("updated_at: cannot scan %T", v)
	}
	return nil
}

func (d *dbTime) parse(s string) error {
	if s == "" {
		d.t = time.Time{}
		return nil
	}
	t, err := time.ParseInLocation(timeLayout, s, time.UTC)
	if err != nil {
		return fmt.Errorf("bad updated_at %q: %w", s, err)
	}
	d.t = t
	return nil
}

// IsURL reports whether a --db value names a PostgreSQL database
// (postgres:// or postgresql://) rather than a SQLite file.
func IsURL(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}
