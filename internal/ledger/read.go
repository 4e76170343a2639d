package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

const sqlRowColumns = `guid, tx_code, state, rsp_code, request, response, attempts, updated_at`

func scanRow(s scanner) (Row, error) { return scanRowInto(s) }

// scanRowInto reads sqlRowColumns, then into more (further columns the
// query selects).
func scanRowInto(s scanner, more ...any) (Row, error) {
	var (
		guid                   string
		txCode, state, rspCode nullString
		request, response      []byte
		attempts               nullInt
		updatedAt              dbTime
	)
	if err := s.Scan(append([]any{&guid, &txCode, &state, &rspCode, &request, &response, &attempts, &updatedAt}, more...)...); err != nil {
		return Row{}, fmt.Errorf("guid %s: %w", guid, err)
	}
	t := updatedAt.t
	return Row{
		GUID:      guid,
		TxCode:    txCode.String,
		State:     State(state.String),
		RspCode:   rspCode.String,
		Request:   request,
		Response:  response,
		Attempts:  int(attempts.Int64),
		UpdatedAt: t,
	}, nil
}

// Get reads one row. A missing row is an error matching ErrNotFound.
func (l *Ledger) Get(ctx context.Context, guid string) (Row, error) {
	if l.isClosed.Load() {
		return Row{}, fmt.Errorf("ledger: get %s: %w", guid, ErrClosed)
	}
	r, err := scanRow(l.st.read().queryRow(ctx, `SELECT `+sqlRowColumns+` FROM tx WHERE guid = ?`, guid))
	if errors.Is(err, errNoRows) {
		return Row{}, fmt.Errorf("ledger: get %s: %w", guid, ErrNotFound)
	}
	if err != nil {
		l.countError(opRead, err)
		return Row{}, fmt.Errorf("ledger: get %s: %w", guid, err)
	}
	return r, nil
}

// scanPageSize is how many rows Scan reads per query (a variable so that
// tests can make pages small).
var scanPageSize = 256

// List returns the rows f selects, ordered by updated_at then guid (oldest
// first, so a batch command that stops early has handled the longest
// waiting rows). See Filter for the boundaries. It holds every row in
// memory: set f.Limit, or use Scan, for a selection that may be large.
func (l *Ledger) List(ctx context.Context, f Filter) ([]Row, error) {
	var out []Row
	err := l.Scan(ctx, f, func(r Row) error {
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Scan calls fn with each row f selects, in List's order, reading
// scanPageSize rows per query and calling fn only between queries. So a
// scan of millions of rows holds one page in memory, and no read snapshot
// stays open while fn works (a long-lived reader would stop checkpoints
// from recycling the WAL, which would then grow for as long as it lasts).
//
// Each page starts after the last row of the one before it, by (updated_at,
// guid). With one state in f (as every batch command has) a page is a range
// of the (state, updated_at) index, however many rows match; with several
// states or none, each page sorts the whole selection, so set a Limit.
//
// A row changed during the scan is seen as it is when its page is read: one
// that no longer matches f is not yielded; one whose updated_at moved past
// the cursor and still matches f is yielded again. With f.ByFirstClaim
// the pages go by (hist_key, guid), which no change moves: each row is
// yielded at most once. An error from fn stops the scan and is returned
// as it is.
func (l *Ledger) Scan(ctx context.Context, f Filter, fn func(Row) error) error {
	if l.isClosed.Load() {
		return fmt.Errorf("ledger: list: %w", ErrClosed)
	}
	d := l.st.dialect()
	where, args, err := f.clauses(d)
	if err != nil {
		return fmt.Errorf("ledger: list: %w", err)
	}
	left := f.Limit
	page := make([]Row, 0, scanPageSize)
	phases := scanPhases
	if f.ByFirstClaim {
		phases = firstClaimPhases
	}
	for _, ph := range phases {
		var after []any // the cursor: nil before the phase's first page
		for {
			n := scanPageSize
			if f.Limit > 0 {
				if left <= 0 {
					return nil
				}
				n = min(n, left)
			}
			a := append(args[:len(args):len(args)], after...)
			page, err = l.readPage(ctx, page[:0], ph.keyed, ph.query(where, after != nil), append(a, n)...)
			if err != nil {
				l.countError(opRead, err)
				return fmt.Errorf("ledger: list: %w", err)
			}
			for _, r := range page {
				if err := fn(r); err != nil {
					return err
				}
			}
			left -= len(page)
			if len(page) < n {
				break
			}
			after = ph.cursor(d, page[len(page)-1])
		}
	}
	return nil
}

// scanPhases are Scan's two passes. Rows with a NULL updated_at (none of
// ours, but the column allows it) sort first, and a row-value comparison
// with NULL is never true: they get pages of their own, by guid, before the
// dated rows. The keys stay bare columns so that the (state, updated_at)
// index serves both the range and the order (TestScanUsesTheIndex).
var scanPhases = []scanPhase{
	{"updated_at IS NULL", "guid > ?", "guid", func(_ *dialect, r Row) []any { return []any{r.GUID} }, false},
	{"updated_at IS NOT NULL", "(updated_at, guid) > (?, ?)", "updated_at, guid", func(d *dialect, r Row) []any { return []any{d.timeArg(r.UpdatedAt), r.GUID} }, false},
}

// firstClaimPhases are Scan's passes for Filter.ByFirstClaim: the rows
// without a hist_key (claimed before schema version 3, or copied: older
// than every keyed row, or of unknown age) first, by guid, then the keyed
// rows by (hist_key, guid). Both are ranges of the first-claim indexes
// (TestScanByFirstClaimUsesTheIndex).
var firstClaimPhases = []scanPhase{
	{"hist_key IS NULL", "guid > ?", "guid", func(_ *dialect, r Row) []any { return []any{r.GUID} }, true},
	{"hist_key IS NOT NULL", "(hist_key, guid) > (?, ?)", "hist_key, guid", func(_ *dialect, r Row) []any { return []any{r.FirstClaim, r.GUID} }, true},
}

type scanPhase struct {
	cond   string                    // the rows of this phase
	after  string                    // rows after the cursor
	order  string                    // the page order
	cursor func(*dialect, Row) []any // the cursor's arguments, from a page's last row
	keyed  bool                      // the rows are read with their hist_key (Row.FirstClaim)
}

// query is the phase's page query for a filter's conditions: its arguments
// are the filter's, then the cursor's (withCursor), then the page size.
func (ph scanPhase) query(where []string, withCursor bool) string {
	w := append(where[:len(where):len(where)], ph.cond)
	if withCursor {
		w = append(w, ph.after)
	}
	cols := sqlRowColumns
	if ph.keyed {
		cols += ", hist_key"
	}
	return `SELECT ` + cols + ` FROM tx WHERE ` + strings.Join(w, " AND ") + ` ORDER BY ` + ph.order + ` LIMIT ?`
}

// readPage runs one page query and returns its rows, the result set
// closed; keyed: the query selects hist_key after sqlRowColumns.
func (l *Ledger) readPage(ctx context.Context, page []Row, keyed bool, q string, args ...any) ([]Row, error) {
	rows, err := l.st.read().query(ctx, q, args...)
	if err != nil {
		return page, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			r   Row
			key nullInt
			err error
		)
		if keyed {
			r, err = scanRowInto(rows, &key)
			r.FirstClaim = key.Int64
		} else {
			r, err = scanRow(rows)
		}
		if err != nil {
			return page, err
		}
		page = append(page, r)
	}
	return page, rows.Err()
}

// Newest returns the row f selects that was updated last (Limit ignored),
// and false when f selects none. Settling checks the core's lookup against
// it: the most recently posted transfer is the one the core is surest to
// still know.
func (l *Ledger) Newest(ctx context.Context, f Filter) (Row, bool, error) {
	if l.isClosed.Load() {
		return Row{}, false, fmt.Errorf("ledger: newest: %w", ErrClosed)
	}
	where, args, err := f.clauses(l.st.dialect())
	if err != nil {
		return Row{}, false, fmt.Errorf("ledger: newest: %w", err)
	}
	q := `SELECT ` + sqlRowColumns + ` FROM tx`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	r, err := scanRow(l.st.read().queryRow(ctx, q+` ORDER BY updated_at DESC, guid DESC LIMIT 1`, args...))
	switch {
	case errors.Is(err, errNoRows):
		return Row{}, false, nil
	case err != nil:
		l.countError(opRead, err)
		return Row{}, false, fmt.Errorf("ledger: newest: %w", err)
	}
	return r, true, nil
}

// Count returns how many rows f selects (Limit ignored), for a progress
// bar's total before a Scan.
func (l *Ledger) Count(ctx context.Context, f Filter) (int, error) {
	if l.isClosed.Load() {
		return 0, fmt.Errorf("ledger: count: %w", ErrClosed)
	}
	d := l.st.dialect()
	where, args, err := f.clauses(d)
	if err != nil {
		return 0, fmt.Errorf("ledger: count: %w", err)
	}
	q := `SELECT COUNT(*) FROM tx`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	var n int
	if err := l.st.read().queryRow(ctx, q, args...).Scan(&n); err != nil {
		l.countError(opRead, err)
		return 0, fmt.Errorf("ledger: count: %w", err)
	}
	return n, nil
}

// clauses turns f into SQL conditions and their arguments.
func (f Filter) clauses(d *dialect) (where []string, args []any, err error) {
	switch {
	case f.ByFirstClaim && len(f.States) == 1:
		// Written out rather than bound: the first-claim indexes are
		// partial (one state each), and a planner proves that a query
		// stays within such an index only from a literal.
		if !f.States[0].Valid() {
			return nil, nil, fmt.Errorf("invalid state %q", f.States[0])
		}
		where = append(where, "state = '"+string(f.States[0])+"'")
	case len(f.States) > 0:
		marks := make([]string, len(f.States))
		for i, s := range f.States {
			if !s.Valid() {
				return nil, nil, fmt.Errorf("invalid state %q", s)
			}
			marks[i] = "?"
			args = append(args, string(s))
		}
		where = append(where, "state IN ("+strings.Join(marks, ",")+")")
	}
	// age is an age condition. In first-claim order it stays a filter:
	// as a range of the (state, updated_at) index it would make every
	// page sort the whole selection by hist_key (n²/page), and a
	// planner without statistics (a new ledger, an outage's rows just
	// written) takes that range.
	age := func(cond string) string {
		if f.ByFirstClaim {
			return "(" + cond + ") IS TRUE"
		}
		return cond
	}
	if !f.UpdatedBefore.IsZero() {
		cond, arg := d.atOrBefore(f.UpdatedBefore)
		where = append(where, age(cond))
		args = append(args, arg)
	}
	if f.OlderThan < 0 {
		return nil, nil, fmt.Errorf("negative age %v", f.OlderThan)
	}
	if f.OlderThan > 0 {
		cond, arg := d.olderThan(f.OlderThan)
		where = append(where, age(cond))
		args = append(args, arg)
	}
	if f.RspCode != "" {
		where = append(where, "rsp_code = ?")
		args = append(args, f.RspCode)
	}
	if f.TxCode != "" {
		where = append(where, "tx_code = ?")
		args = append(args, f.TxCode)
	}
	if len(f.GUIDs) > 0 {
		where = append(where, "guid IN ("+strings.Repeat("?,", len(f.GUIDs)-1)+"?)")
		for _, g := range f.GUIDs {
			args = append(args, g)
		}
	}
	if f.MaxAttempts > 0 {
		where = append(where, "COALESCE(attempts, 0) < ?")
		args = append(args, f.MaxAttempts)
	}
	if f.MinAttempts > 0 {
		where = append(where, "COALESCE(attempts, 0) >= ?")
		args = append(args, f.MinAttempts)
	}
	return where, args, nil
}

// Stats counts rows by state and by (state, rsp_code), and finds the oldest
// UNKNOWN and SENT rows, all from one read snapshot.
func (l *Ledger) Stats(ctx context.Context) (StateCounts, error) {
	if l.isClosed.Load() {
		return StateCounts{}, fmt.Errorf("ledger: stats: %w", ErrClosed)
	}
	st, err := l.stats(ctx)
	if err != nil {
		return StateCounts{}, fmt.Errorf("ledger: stats: %w", err)
	}
	return st, nil
}

func (l *Ledger) stats(ctx context.Context) (StateCounts, error) {
	st := StateCounts{ByState: make(map[State]int64, len(States))}
	err := l.st.snapshot(ctx, func(q querier) error {
		st = StateCounts{ByState: make(map[State]int64, len(States))}
		for _, s := range States {
			st.ByState[s] = 0
		}
		rows, err := q.query(ctx, `SELECT COALESCE(state, ''), COALESCE(rsp_code, ''), COUNT(*)
FROM tx GROUP BY 1, 2 ORDER BY 1, 2`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c CodeCount
			var s string
			if err := rows.Scan(&s, &c.RspCode, &c.Count); err != nil {
				return err
			}
			c.State = State(s)
			st.ByCode = append(st.ByCode, c)
			st.ByState[c.State] += c.Count
			st.Total += c.Count
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()

		oldest := func(s State) (time.Time, error) {
			var t dbTime
			err := q.queryRow(ctx, `SELECT MIN(updated_at) FROM tx WHERE state = ?`, string(s)).Scan(&t)
			return t.t, err
		}
		if st.OldestUnknown, err = oldest(StateUnknown); err != nil {
			return err
		}
		if st.OldestSent, err = oldest(StateSent); err != nil {
			return err
		}
		var now dbTime
		err = q.queryRow(ctx, `SELECT CURRENT_TIMESTAMP`).Scan(&now)
		st.Now = now.t
		return err
	})
	if err != nil {
		l.countError(opRead, err)
	}
	return st, err
}
