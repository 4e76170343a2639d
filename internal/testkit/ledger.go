// The ledger's two stores for tests, and its rows reached from outside
// package ledger, as another process would reach them.

package testkit

import (
	"context"
	"database/sql"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	// The SQLite driver, registered as "sqlite3".
	_ "github.com/mattn/go-sqlite3"

	"lhrelay/internal/pgtest"
)

// A Store makes a fresh, empty ledger location (--db value) for a test.
type Store struct {
	Name string
	New  func(t testing.TB) string
}

// Stores are the two stores every ledger test runs on.
var Stores = []Store{
	{"sqlite", func(t testing.TB) string { return filepath.Join(t.TempDir(), "relay.db") }},
	{"postgres", pgtest.URL},
}

// EachStore runs fn as a subtest per store, with a fresh --db value each:
// every rule of the ledger holds on both.
func EachStore(t *testing.T, fn func(t *testing.T, db string)) {
	t.Helper()
	for _, s := range Stores {
		t.Run(s.Name, func(t *testing.T) { fn(t, s.New(t)) })
	}
}

// Raw is a connection to a ledger outside package ledger, to put rows in a
// state or an age the ledger's own methods never produce. Its statements
// use '?' placeholders on both stores, and Now and Time stand for the
// store's own time values.
type Raw struct {
	t  testing.TB
	pg *pgx.Conn
	db *sql.DB
}

// OpenRaw connects to the ledger at db (which must exist) and closes the
// connection when the test ends. postgres is ledger.IsURL(db): the kit does
// not import package ledger, whose own tests use it, so the caller asks the
// ledger which store db names.
func OpenRaw(t testing.TB, db string, postgres bool) *Raw {
	t.Helper()
	r := &Raw{t: t}
	if postgres {
		c, err := pgx.Connect(context.Background(), db)
		if err != nil {
			t.Fatalf("testkit: %v", err)
		}
		r.pg = c
		t.Cleanup(func() { c.Close(context.Background()) })
		return r
	}
	d, err := sql.Open("sqlite3", "file:"+db+"?mode=rw&_busy_timeout=10000")
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	r.db = d
	t.Cleanup(func() { d.Close() })
	return r
}

// Postgres reports whether the ledger is a PostgreSQL one, for statements
// each store spells its own way.
func (r *Raw) Postgres() bool { return r.pg != nil }

// Now is the SQL for the store's current time, as updated_at holds it.
func (r *Raw) Now() string {
	if r.pg != nil {
		return "now()"
	}
	return "datetime('now')"
}

// Time is at as an updated_at argument.
func (r *Raw) Time(at time.Time) any {
	if r.pg != nil {
		return at
	}
	return at.UTC().Format("2006-01-02 15:04:05")
}

// Exec runs a statement and returns the rows it affected; an error fails
// the test.
func (r *Raw) Exec(q string, args ...any) int64 {
	r.t.Helper()
	n, err := r.TryExec(q, args...)
	if err != nil {
		r.t.Fatalf("testkit: %s: %v", q, err)
	}
	return n
}

// TryExec is Exec that returns the error.
func (r *Raw) TryExec(q string, args ...any) (int64, error) {
	if r.pg != nil {
		tag, err := r.pg.Exec(context.Background(), dollars(q), args...)
		return tag.RowsAffected(), err
	}
	res, err := r.db.Exec(q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// QueryRow scans one row.
func (r *Raw) QueryRow(q string, args []any, dest ...any) error {
	if r.pg != nil {
		return r.pg.QueryRow(context.Background(), dollars(q), args...).Scan(dest...)
	}
	return r.db.QueryRow(q, args...).Scan(dest...)
}

// SetUpdatedAt sets a row's updated_at.
func (r *Raw) SetUpdatedAt(guid string, at time.Time) {
	r.t.Helper()
	if n := r.Exec(`UPDATE tx SET updated_at = ? WHERE guid = ?`, r.Time(at), guid); n != 1 {
		r.t.Fatalf("testkit: set updated_at of %s: %d rows", guid, n)
	}
}

// dollars numbers '?' placeholders for PostgreSQL.
func dollars(q string) string {
	parts := strings.Split(q, "?")
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString("$" + strconv.Itoa(i))
		}
		b.WriteString(p)
	}
	return b.String()
}
