package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// CopyCounts is what Copy did.
type CopyCounts struct {
	Read    int // rows read from the source
	Copied  int // inserted into the target
	Present int // already in the target with the same content (a re-run)
	// Conflicts are rows whose GUID the target holds with different
	// content: left as they are in the target.
	Conflicts []string
	// History is how many history entries were copied (those the target
	// already held are not counted).
	History int64
}

// copyPage is how many rows Copy inserts in one statement.
const copyPage = 200

// Copy copies every row of from into to as it is (state, codes, frames,
// attempts, updated_at), and from's history with it (every chain as it
// is, so it verifies in to), for moving an installation from one host's SQLite
// file to a shared PostgreSQL ledger (or back). A row whose GUID is already
// in to is never overwritten: with the same content it counts as Present
// (so Copy may be run again), with different content it is a Conflict.
// Run it while no relay writes to from: a row changed during the copy may
// be copied as it was.
func Copy(ctx context.Context, from, to *Ledger) (CopyCounts, error) {
	var c CopyCounts
	page := make([]Row, 0, copyPage)
	flush := func() error {
		if len(page) == 0 {
			return nil
		}
		err := to.importPage(ctx, page, &c, "copied from "+from.Path())
		page = page[:0]
		return err
	}
	// One state at a time: each state's pages are ranges of the index.
	for _, s := range States {
		err := from.Scan(ctx, Filter{States: []State{s}}, func(r Row) error {
			c.Read++
			page = append(page, r)
			if len(page) == copyPage {
				return flush()
			}
			return nil
		})
		if err == nil {
			err = flush()
		}
		if err != nil {
			return c, fmt.Errorf("ledger: copy %s → %s: %w", from.Path(), to.Path(), err)
		}
	}
	// Rows in a state outside the five (the CHECK forbids them) or NULL.
	n, err := from.Count(ctx, Filter{})
	if err != nil {
		return c, fmt.Errorf("ledger: copy: %w", err)
	}
	if n != c.Read {
		return c, fmt.Errorf("ledger: copy: %s holds %d rows, %d of them in one of the five states: the rest were not copied", from.Path(), n, c.Read)
	}
	if c.History, err = to.copyHistory(ctx, from); err != nil {
		return c, fmt.Errorf("ledger: copy history %s → %s: %w", from.Path(), to.Path(), err)
	}
	return c, nil
}

// importPage inserts page's rows that to does not hold, in one statement,
// then compares every row of page with to's: each is now either the row
// just inserted, one inserted by an earlier copy, or a conflict.
func (l *Ledger) importPage(ctx context.Context, page []Row, c *CopyCounts, reason string) error {
	d := l.st.dialect()
	marks := make([]string, len(page))
	args := make([]any, 0, 8*len(page))
	for i, r := range page {
		marks[i] = "(?, ?, ?, ?, ?, ?, ?, ?)"
		var at any
		if !r.UpdatedAt.IsZero() {
			at = d.timeArg(r.UpdatedAt)
		}
		args = append(args, r.GUID, r.TxCode, string(r.State), r.RspCode, r.Request, r.Response, r.Attempts, at)
	}
	var inserted int64
	err := l.st.do(ctx, operation{run: opFunc(func(tx stmts) error {
		var err error
		q := `INSERT INTO tx(` + sqlRowColumns + `) VALUES ` + strings.Join(marks, ", ") + ` ON CONFLICT (guid) DO NOTHING
RETURNING guid, state, rsp_code, attempts`
		inserted, err = tx.change(q, args, func(s scanner) (pending, error) {
			var guid string
			var state, rsp nullString
			var attempts nullInt
			err := s.Scan(&guid, &state, &rsp, &attempts)
			return pending{guid: guid, stateAfter: State(state.String), rspAfter: rsp.String,
				attempts: int(attempts.Int64), why: Why{Reason: reason}}, err
		})
		return err
	})})
	if err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	c.Copied += int(inserted)

	guids := make([]any, len(page))
	for i, r := range page {
		guids[i] = r.GUID
	}
	q := `SELECT ` + sqlRowColumns + ` FROM tx WHERE guid IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(page)), ", ") + `)`
	rows, err := l.st.read().query(ctx, q, guids...)
	if err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	defer rows.Close()
	held := make(map[string]Row, len(page))
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return fmt.Errorf("compare: %w", err)
		}
		held[r.GUID] = r
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	same := 0
	for _, r := range page {
		h, ok := held[r.GUID]
		switch {
		case !ok:
			return errors.New("a row inserted or found is missing: is another process deleting rows?")
		case sameRow(h, r):
			same++
		default:
			c.Conflicts = append(c.Conflicts, r.GUID)
		}
	}
	c.Present += same - int(inserted)
	return nil
}

// sameRow compares two rows' content, updated_at at whole seconds (SQLite
// keeps no more).
func sameRow(a, b Row) bool {
	return a.GUID == b.GUID && a.TxCode == b.TxCode && a.State == b.State && a.RspCode == b.RspCode &&
		bytes.Equal(a.Request, b.Request) && bytes.Equal(a.Response, b.Response) && a.Attempts == b.Attempts &&
		a.UpdatedAt.Truncate(time.Second).Equal(b.UpdatedAt.Truncate(time.Second))
}
