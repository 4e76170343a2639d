package ledger

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mattn/go-sqlite3"
)

// sqliteWriter is the writer's connection as the driver's own
// *sqlite3.SQLiteConn, with its statements prepared once and kept for the
// Ledger's life. The writer runs a few statements many thousand times a
// second on one connection that only it uses: database/sql's pool locks,
// context plumbing, argument slices and result wrappers were about a third
// of the allocations of a transfer and none of them buys anything here.
// It exists only inside the writer goroutine's sql.Conn.Raw call
// (sqliteStore.writer), and only the writer goroutine touches it.
type sqliteWriter struct {
	c     *sqlite3.SQLiteConn
	stmts map[string]preparedStmt
	// Reused by every statement: only one runs at a time, and the driver
	// does not keep them once it has bound or read a row.
	args []driver.NamedValue
	vals []driver.Value
	rows rawRows
}

type preparedStmt struct {
	s     *sqlite3.SQLiteStmt
	nargs int
}

func newSQLiteWriter(c *sqlite3.SQLiteConn) *sqliteWriter {
	return &sqliteWriter{c: c, stmts: map[string]preparedStmt{}}
}

// close finalizes the prepared statements (before the connection closes).
func (w *sqliteWriter) close() {
	for q, p := range w.stmts {
		p.s.Close()
		delete(w.stmts, q)
	}
}

// begin starts a transaction: BEGIN IMMEDIATE, as the DSN's _txlock
// makes every other transaction start. The writer's BEGIN, COMMIT and
// ROLLBACK are prepared statements like its others: the driver's own
// Begin and Commit run them as text, at four allocations each.
func (w *sqliteWriter) begin() (driver.Tx, error) {
	if _, err := w.exec("BEGIN IMMEDIATE", nil); err != nil {
		return nil, err
	}
	return writerTx{w}, nil
}

// writerTx is the writer's transaction (begin).
type writerTx struct{ w *sqliteWriter }

// Commit commits; if that fails it rolls back, as the driver's Commit
// does: SQLite may leave the transaction open, and nothing of it may be
// taken for committed.
func (t writerTx) Commit() error {
	_, err := t.w.exec("COMMIT", nil)
	if err != nil {
		t.w.exec("ROLLBACK", nil)
	}
	return err
}

func (t writerTx) Rollback() error {
	_, err := t.w.exec("ROLLBACK", nil)
	return err
}

// stmt is q prepared, from the cache or now. q must be one statement: a
// prepared statement runs only the first of several, silently.
func (w *sqliteWriter) stmt(q string) (preparedStmt, error) {
	if p, ok := w.stmts[q]; ok {
		return p, nil
	}
	if strings.Contains(strings.TrimRight(strings.TrimSpace(q), ";"), ";") {
		return preparedStmt{}, errors.New("ledger: the writer runs one statement at a time")
	}
	ds, err := w.c.PrepareContext(context.Background(), q)
	if err != nil {
		return preparedStmt{}, err
	}
	s, ok := ds.(*sqlite3.SQLiteStmt)
	if !ok {
		ds.Close()
		return preparedStmt{}, fmt.Errorf("ledger: driver statement is %T", ds)
	}
	p := preparedStmt{s: s, nargs: s.NumInput()}
	w.stmts[q] = p
	return p, nil
}

// bind prepares q and converts args to the driver's values, as database/sql
// would (numbers of other sizes, named types, driver.Valuer).
func (w *sqliteWriter) bind(q string, args []any) (preparedStmt, []driver.NamedValue, error) {
	p, err := w.stmt(q)
	if err != nil {
		return p, nil, err
	}
	if len(args) != p.nargs {
		return p, nil, fmt.Errorf("ledger: statement takes %d arguments, got %d", p.nargs, len(args))
	}
	nv := w.args[:0]
	for i, a := range args {
		v, err := driverValue(a)
		if err != nil {
			return p, nil, fmt.Errorf("argument %d: %w", i+1, err)
		}
		nv = append(nv, driver.NamedValue{Ordinal: i + 1, Value: v})
	}
	w.args = nv
	return p, nv, nil
}

func driverValue(a any) (driver.Value, error) {
	switch v := a.(type) {
	case nil, string, int64, []byte, float64, bool, time.Time:
		return v, nil
	case int:
		return int64(v), nil
	}
	return driver.DefaultParameterConverter.ConvertValue(a)
}

// exec runs a statement that returns no rows and returns the rows it
// changed.
func (w *sqliteWriter) exec(q string, args []any) (int64, error) {
	p, nv, err := w.bind(q, args)
	if err != nil {
		return 0, err
	}
	// A context without Done keeps the driver on its synchronous path.
	res, err := p.s.ExecContext(context.Background(), nv)
	clear(nv)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// query runs a statement that returns rows; the caller closes them before
// running the next statement.
func (w *sqliteWriter) query(q string, args []any) (*rawRows, error) {
	p, nv, err := w.bind(q, args)
	if err != nil {
		return nil, err
	}
	dr, err := p.s.QueryContext(context.Background(), nv)
	clear(nv)
	if err != nil {
		return nil, err
	}
	n := len(dr.Columns())
	if cap(w.vals) < n {
		w.vals = make([]driver.Value, n)
	}
	w.rows = rawRows{r: dr, vals: w.vals[:n]}
	return &w.rows, nil
}

// rawRows reads a driver's rows into a Scan's destinations.
type rawRows struct {
	r    driver.Rows
	vals []driver.Value
	err  error
}

func (r *rawRows) Next() bool {
	if r.err != nil || r.r == nil {
		return false
	}
	err := r.r.Next(r.vals)
	if err == io.EOF {
		return false
	}
	if err != nil {
		r.err = err
		return false
	}
	return true
}

func (r *rawRows) Scan(dest ...any) error {
	if len(dest) != len(r.vals) {
		return fmt.Errorf("ledger: %d destinations for %d columns", len(dest), len(r.vals))
	}
	for i, d := range dest {
		if err := scanValue(d, r.vals[i]); err != nil {
			return fmt.Errorf("column %d: %w", i+1, err)
		}
	}
	return nil
}

func (r *rawRows) Err() error { return r.err }

func (r *rawRows) Close() {
	if r.r != nil {
		r.r.Close()
	}
	clear(r.vals)
	r.r = nil
}

// scanValue stores v in dest as database/sql's Scan would, for the
// destinations the writer's operations use (database/sql's conversions
// do the work); a []byte is copied, since the driver may reuse it.
func scanValue(dest any, v driver.Value) error {
	switch d := dest.(type) {
	case sql.Scanner:
		return d.Scan(v)
	case *[]byte:
		return scanNull(d, v, true)
	case *string:
		return scanNull(d, v, false)
	case *int64:
		return scanNull(d, v, false)
	case *int:
		return scanNull(d, v, false)
	case *bool:
		return scanNull(d, v, false)
	case *float64:
		return scanNull(d, v, false)
	case *time.Time:
		return scanNull(d, v, false)
	case *any:
		if b, ok := v.([]byte); ok {
			v = append([]byte(nil), b...)
		}
		*d = v
		return nil
	}
	return fmt.Errorf("ledger: cannot scan into %T", dest)
}

// scanNull converts v with sql.Null's Scan (database/sql's conversions);
// NULL is the zero value where nullOK, an error elsewhere, as in Scan.
func scanNull[T any](d *T, v driver.Value, nullOK bool) error {
	var n sql.Null[T]
	if err := n.Scan(v); err != nil {
		return err
	}
	if !n.Valid && !nullOK {
		return fmt.Errorf("converting NULL to %T is unsupported", *d)
	}
	*d = n.V
	return nil
}

// rawRow is a queryRow's result: the statement runs when it is scanned.
type rawRow struct {
	w    *sqliteWriter
	q    string
	args []any
}

func (r rawRow) Scan(dest ...any) error {
	rows, err := r.w.query(r.q, r.args)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return errNoRows
	}
	return rows.Scan(dest...)
}
