package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The reads of an operator's console (ledger serve): pages of rows by
// keyset, GUIDs by prefix, and the links of a GUID's history entries.

// Cursor is where a Page starts: after the row with this updated_at and
// GUID, in List's order. The zero Cursor starts at the oldest row.
type Cursor struct {
	UpdatedAt time.Time
	GUID      string
}

// After is the cursor just past r.
func After(r Row) Cursor { return Cursor{UpdatedAt: r.UpdatedAt, GUID: r.GUID} }

// IsZero reports whether c starts at the beginning.
func (c Cursor) IsZero() bool { return c.GUID == "" }

// Page returns at most n rows f selects (f.Limit ignored) after c, in
// List's order (updated_at, then guid), rows without an updated_at left
// out. It is one query that reads no row before c: with one state in f, a
// range of the (state, updated_at) index however deep the page, never an
// OFFSET.
func (l *Ledger) Page(ctx context.Context, f Filter, c Cursor, n int) ([]Row, error) {
	if l.isClosed.Load() {
		return nil, fmt.Errorf("ledger: page: %w", ErrClosed)
	}
	if n <= 0 {
		return nil, nil
	}
	d := l.st.dialect()
	where, args, err := f.clauses(d)
	if err != nil {
		return nil, fmt.Errorf("ledger: page: %w", err)
	}
	ph := scanPhases[1] // the dated rows
	if !c.IsZero() {
		args = append(args, ph.cursor(d, Row{GUID: c.GUID, UpdatedAt: c.UpdatedAt})...)
	}
	rows, err := l.readPage(ctx, nil, ph.keyed, ph.query(where, !c.IsZero()), append(args, n)...)
	if err != nil {
		l.countError(opRead, err)
		return nil, fmt.Errorf("ledger: page: %w", err)
	}
	return rows, nil
}

// GUIDMatch is a GUID found by SearchGUIDs.
type GUIDMatch struct {
	GUID string
	// Purged: no row has it any more; its history remains.
	Purged bool
}

// SearchGUIDs returns, in order, at most n GUIDs that start with prefix
// (lowercase hex, as GUIDs are): those of rows, and those of rows purged
// since (their history's ending entries). Both are ranges of an index
// (tx's primary key; history_guid_unkeyed on SQLite, history_guid on
// PostgreSQL).
func (l *Ledger) SearchGUIDs(ctx context.Context, prefix string, n int) ([]GUIDMatch, error) {
	if l.isClosed.Load() {
		return nil, fmt.Errorf("ledger: search: %w", ErrClosed)
	}
	if prefix == "" || strings.Trim(prefix, "0123456789abcdef") != "" {
		return nil, fmt.Errorf("ledger: search: %q is not lowercase hex", prefix)
	}
	// 'g' sorts after every hex digit: [prefix, prefix+"g") is the range
	// of the GUIDs that start with prefix, in the C and the usual
	// collations alike.
	hi := prefix + "g"
	seen := map[string]bool{}
	var out []GUIDMatch
	rows, err := l.st.read().query(ctx, `SELECT guid FROM tx WHERE guid >= ? AND guid < ? ORDER BY guid LIMIT ?`, prefix, hi, n)
	if err != nil {
		return nil, fmt.Errorf("ledger: search: %w", err)
	}
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			rows.Close()
			return nil, fmt.Errorf("ledger: search: %w", err)
		}
		seen[g] = true
		out = append(out, GUIDMatch{GUID: g})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger: search: %w", err)
	}
	rows, err = l.st.read().query(ctx, `SELECT DISTINCT guid FROM history WHERE guid >= ? AND guid < ? AND (hist_key IS NULL OR state_after = '') ORDER BY guid LIMIT ?`, prefix, hi, n)
	if err != nil {
		return nil, fmt.Errorf("ledger: search: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			return nil, fmt.Errorf("ledger: search: %w", err)
		}
		if !seen[g] {
			seen[g] = true
			out = append(out, GUIDMatch{GUID: g, Purged: true})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger: search: %w", err)
	}
	slices.SortFunc(out, func(a, b GUIDMatch) int { return strings.Compare(a.GUID, b.GUID) })
	if len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// EntryCheck is what CheckEntries found of one entry.
type EntryCheck struct {
	// Hash: the entry's content matches its hash.
	Hash bool
	// Linked: its prev_hash is the hash of the entry before it in its
	// chain (or the chain's cut), and the entry after it (or the chain's
	// head) links to it.
	Linked bool
	// Why says what failed ("" when both hold).
	Why string
}

// OK reports whether the entry verifies where it stands.
func (c EntryCheck) OK() bool { return c.Hash && c.Linked }

// CheckEntries checks each of a GUID's entries where it stands in its
// chain: its hash, and its links to its neighbours (the entry before and
// the one after, or the chain's cut and head). A few reads by primary key
// per entry, whatever the size of the chains: it shows whether these
// entries were edited, or an entry beside them removed or inserted. The
// whole chain is Audit's.
func (l *Ledger) CheckEntries(ctx context.Context, es []Entry) ([]EntryCheck, error) {
	if l.isClosed.Load() {
		return nil, fmt.Errorf("ledger: check entries: %w", ErrClosed)
	}
	out := make([]EntryCheck, len(es))
	err := l.st.snapshot(ctx, func(q querier) error {
		heads := map[string]Chain{}
		for i, e := range es {
			c := EntryCheck{Hash: e.Verify()}
			var why []string
			if !c.Hash {
				why = append(why, "its content does not match its hash: edited")
			}
			h, ok := heads[e.Chain]
			if !ok {
				err := q.queryRow(ctx, `SELECT head_seq, head_hash, cut_seq, cut_hash FROM history_chain WHERE chain = ?`, e.Chain).
					Scan(&h.Seq, &h.Hash, &h.CutSeq, &h.CutHash)
				switch {
				case errors.Is(err, errNoRows):
					h.Seq = -1 // no head: nothing links
				case err != nil:
					return err
				}
				heads[e.Chain] = h
			}
			prevOK, nextOK := false, false
			switch {
			case h.Seq < 0:
				why = append(why, "its chain has no head in history_chain")
			case e.Seq == h.CutSeq+1:
				prevOK = e.PrevHash == h.CutHash
			default:
				var prev string
				err := q.queryRow(ctx, `SELECT hash FROM history WHERE chain = ? AND seq = ?`, e.Chain, e.Seq-1).Scan(&prev)
				if err != nil && !errors.Is(err, errNoRows) {
					return err
				}
				prevOK = err == nil && prev == e.PrevHash
			}
			switch {
			case h.Seq < 0:
			case e.Seq == h.Seq:
				nextOK = h.Hash == e.Hash
			case e.Seq > h.Seq:
				why = append(why, fmt.Sprintf("beyond its chain's head %d: inserted", h.Seq))
			default:
				var next string
				err := q.queryRow(ctx, `SELECT prev_hash FROM history WHERE chain = ? AND seq = ?`, e.Chain, e.Seq+1).Scan(&next)
				if err != nil && !errors.Is(err, errNoRows) {
					return err
				}
				nextOK = err == nil && next == e.Hash
			}
			if h.Seq >= 0 && !prevOK {
				why = append(why, "does not link to the entry before it")
			}
			if h.Seq >= 0 && e.Seq <= h.Seq && !nextOK {
				why = append(why, "the entry after it does not link to it")
			}
			c.Linked = prevOK && nextOK
			c.Why = strings.Join(why, "; ")
			out[i] = c
		}
		return nil
	})
	if err != nil {
		l.countError(opRead, err)
		return nil, fmt.Errorf("ledger: check entries: %w", err)
	}
	return out, nil
}
