package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

const sqlRowColumns = `guid, tx_code, state, rsp_code, request, response, attempts, updated_at`

type scanner interface{ Scan(dest ...any) error }

func scanRow(s scanner) (Row, error) {
	var (
		guid                              string
		txCode, state, rspCode, updatedAt sql.NullString
		request, response                 []byte
		attempts                          sql.NullInt64
	)
	if err := s.Scan(&guid, &txCode, &state, &rspCode, &request, &response, &attempts, &updatedAt); err != nil {
		return Row{}, err
	}
	t, err := parseTime(updatedAt)
	if err != nil {
		return Row{}, fmt.Errorf("guid %s: %w", guid, err)
	}
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
	r, err := scanRow(l.rdb.QueryRowContext(ctx, `SELECT `+sqlRowColumns+` FROM tx WHERE guid = ?`, guid))
	if errors.Is(err, sql.ErrNoRows) {
		return Row{}, fmt.Errorf("ledger: get %s: %w", guid, ErrNotFound)
	}
	if err != nil {
		return Row{}, fmt.Errorf("ledger: get %s: %w", guid, err)
	}
	return r, nil
}

// List returns the rows f selects, ordered by updated_at then guid (oldest
// first, so a batch command that stops early has handled the longest
// waiting rows). See Filter for the boundaries.
func (l *Ledger) List(ctx context.Context, f Filter) ([]Row, error) {
	if l.isClosed.Load() {
		return nil, fmt.Errorf("ledger: list: %w", ErrClosed)
	}
	var (
		where []string
		args  []any
	)
	if len(f.States) > 0 {
		marks := make([]string, len(f.States))
		for i, s := range f.States {
			if !s.Valid() {
				return nil, fmt.Errorf("ledger: list: invalid state %q", s)
			}
			marks[i] = "?"
			args = append(args, string(s))
		}
		where = append(where, "state IN ("+strings.Join(marks, ",")+")")
	}
	if !f.UpdatedBefore.IsZero() {
		where = append(where, "updated_at <= ?")
		args = append(args, formatTime(f.UpdatedBefore))
	}
	if f.RspCode != "" {
		where = append(where, "rsp_code = ?")
		args = append(args, f.RspCode)
	}
	if f.MaxAttempts > 0 {
		where = append(where, "COALESCE(attempts, 0) < ?")
		args = append(args, f.MaxAttempts)
	}
	q := `SELECT ` + sqlRowColumns + ` FROM tx`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY updated_at, guid"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}

	rows, err := l.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("ledger: list: %w", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, fmt.Errorf("ledger: list: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger: list: %w", err)
	}
	return out, nil
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
	// A read transaction gives the queries one consistent snapshot (WAL).
	tx, err := l.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return StateCounts{}, err
	}
	defer tx.Rollback()

	st := StateCounts{ByState: make(map[State]int64, len(States))}
	for _, s := range States {
		st.ByState[s] = 0
	}
	rows, err := tx.QueryContext(ctx, `SELECT COALESCE(state, ''), COALESCE(rsp_code, ''), COUNT(*)
FROM tx GROUP BY 1, 2 ORDER BY 1, 2`)
	if err != nil {
		return StateCounts{}, err
	}
	defer rows.Close()
	for rows.Next() {
		var c CodeCount
		var s string
		if err := rows.Scan(&s, &c.RspCode, &c.Count); err != nil {
			return StateCounts{}, err
		}
		c.State = State(s)
		st.ByCode = append(st.ByCode, c)
		st.ByState[c.State] += c.Count
		st.Total += c.Count
	}
	if err := rows.Err(); err != nil {
		return StateCounts{}, err
	}
	rows.Close()

	oldest := func(s State) (sql.NullString, error) {
		var t sql.NullString
		err := tx.QueryRowContext(ctx, `SELECT MIN(updated_at) FROM tx WHERE state = ?`, string(s)).Scan(&t)
		return t, err
	}
	u, err := oldest(StateUnknown)
	if err != nil {
		return StateCounts{}, err
	}
	if st.OldestUnknown, err = parseTime(u); err != nil {
		return StateCounts{}, err
	}
	s, err := oldest(StateSent)
	if err != nil {
		return StateCounts{}, err
	}
	if st.OldestSent, err = parseTime(s); err != nil {
		return StateCounts{}, err
	}
	return st, nil
}
