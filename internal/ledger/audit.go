package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

func scanEntry(s scanner) (Entry, error) {
	var (
		e                 Entry
		at                dbTime
		sb, sa            string
		attempts, pid, st int64
		tookUs            int64
	)
	err := s.Scan(&e.Chain, &e.Seq, &e.PrevHash, &e.Hash, &e.GUID, &at, &sb, &e.RspBefore, &sa, &e.RspAfter,
		&attempts, &e.Command, &e.Host, &pid, &e.Reason, &st, &tookUs)
	if err != nil {
		return Entry{}, fmt.Errorf("read history entry: %w", err)
	}
	e.At = at.t.Truncate(time.Microsecond)
	e.StateBefore, e.StateAfter = State(sb), State(sa)
	e.Attempts, e.PID, e.HTTPStatus = int(attempts), int(pid), int(st)
	e.Took = time.Duration(tookUs) * time.Microsecond
	return e, nil
}

// sqlHistoryOf reads a GUID's entries (schema.sql, version 3): those with
// the key of its row or of an entry that ended a row of it, and those with
// no key. On SQLite each part is a search of one index (history_key,
// history_guid_unkeyed); on PostgreSQL, of history_guid. UNION also drops
// the entries both parts find (the ending entries).
const sqlHistoryOf = `SELECT ` + historyColumns + ` FROM history WHERE guid = ? AND (hist_key IS NULL OR state_after = '')
UNION
SELECT ` + historyColumns + ` FROM history WHERE guid = ? AND hist_key IN (
    SELECT hist_key FROM tx WHERE guid = ?
    UNION
    SELECT hist_key FROM history WHERE guid = ? AND (hist_key IS NULL OR state_after = ''))
ORDER BY at, chain, seq`

// History returns the history entries of one GUID, oldest first (by the
// time of their transaction, then chain and sequence). A GUID with no
// entries gives none and no error.
func (l *Ledger) History(ctx context.Context, guid string) ([]Entry, error) {
	if l.isClosed.Load() {
		return nil, fmt.Errorf("ledger: history %s: %w", guid, ErrClosed)
	}
	rows, err := l.st.read().query(ctx, sqlHistoryOf, guid, guid, guid, guid)
	if err != nil {
		return nil, fmt.Errorf("ledger: history %s: %w", guid, err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, fmt.Errorf("ledger: history %s: %w", guid, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger: history %s: %w", guid, err)
	}
	return out, nil
}

// Chain is one history chain as history_chain records it.
type Chain struct {
	ChainHead
	Command   string
	Host      string
	PID       int
	StartedAt time.Time
	// CutSeq and CutHash: the last entry a purge of history removed (0 and
	// "" when none was); the chain's first remaining entry follows it.
	CutSeq  int64
	CutHash string
}

// Chains lists every chain of the history, by name.
func (l *Ledger) Chains(ctx context.Context) ([]Chain, error) {
	rows, err := l.st.read().query(ctx, `SELECT chain, head_seq, head_hash, command, host, pid, started_at, cut_seq, cut_hash FROM history_chain ORDER BY chain`)
	if err != nil {
		return nil, fmt.Errorf("ledger: chains: %w", err)
	}
	defer rows.Close()
	var out []Chain
	for rows.Next() {
		var c Chain
		var pid int64
		var started dbTime
		if err := rows.Scan(&c.Chain, &c.Seq, &c.Hash, &c.Command, &c.Host, &pid, &started, &c.CutSeq, &c.CutHash); err != nil {
			return nil, fmt.Errorf("ledger: chains: %w", err)
		}
		c.PID, c.StartedAt = int(pid), started.t
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger: chains: %w", err)
	}
	return out, nil
}

// AuditSummary is what a clean Audit saw.
type AuditSummary struct {
	Chains  int
	Entries int64
	// First and Last: the oldest and newest entry's time (zero when none).
	First, Last time.Time
	// Conflicts are the entries that record an outcome refused because
	// its row had been re-claimed since (ConflictReason): transfers that
	// may be posted twice, for someone to decide about. Oldest first, at
	// most MaxAuditConflicts; ConflictCount counts them all.
	Conflicts     []Entry
	ConflictCount int64
}

// MaxAuditConflicts is how many conflict entries an AuditSummary keeps.
const MaxAuditConflicts = 100

// ErrAudit: the history does not verify; the error is an *AuditError.
var ErrAudit = errors.New("history does not verify")

// AuditError names the first entry of a chain that does not verify, and why.
type AuditError struct {
	Chain string
	Seq   int64  // the entry's sequence number (the expected one, when missing)
	GUID  string // the entry's GUID, when there is an entry
	Why   string
}

func (e *AuditError) Error() string {
	g := ""
	if e.GUID != "" {
		g = " (guid " + e.GUID + ")"
	}
	return fmt.Sprintf("chain %s entry %d%s: %s: %v", e.Chain, e.Seq, g, e.Why, ErrAudit)
}

func (e *AuditError) Unwrap() error { return ErrAudit }

// auditPage is how many entries Audit reads per query.
const auditPage = 1000

// Audit walks every chain of the history and checks each entry: its
// sequence number follows the one before (after the chain's cut), its
// PrevHash is that entry's hash, its Hash is the hash of its content, and
// the last one is the head history_chain records. It detects an edited,
// removed (the last ones too), inserted or reordered entry, and entries of
// a chain with no head. It does not detect a whole chain rewritten
// together with its head: comparing heads with those published outside
// the database (ChainHead) does. The first failure is an *AuditError
// (ErrAudit); any other error is reading's.
//
// Each chain is read in one snapshot, so writers may go on meanwhile.
func (l *Ledger) Audit(ctx context.Context) (AuditSummary, error) {
	var sum AuditSummary
	if l.isClosed.Load() {
		return sum, fmt.Errorf("ledger: audit: %w", ErrClosed)
	}
	var orphan nullString
	err := l.st.read().queryRow(ctx, `SELECT MIN(chain) FROM history WHERE chain NOT IN (SELECT chain FROM history_chain)`).Scan(&orphan)
	if err != nil {
		return sum, fmt.Errorf("ledger: audit: %w", err)
	}
	// A chain that has entries but no head can be a chain written before
	// its head's row committed, in a snapshot taken between: re-read below
	// in one snapshot per chain settles it.
	chains, err := l.Chains(ctx)
	if err != nil {
		return sum, fmt.Errorf("ledger: audit: %w", err)
	}
	if orphan.Valid {
		headless := true
		for _, c := range chains {
			if c.Chain == orphan.String {
				headless = false
			}
		}
		if headless {
			return sum, &AuditError{Chain: orphan.String, Seq: 0, Why: "entries of a chain that has no head in history_chain (its head removed?)"}
		}
	}
	for _, c := range chains {
		err := l.st.snapshot(ctx, func(q querier) error { return auditChain(ctx, q, c.Chain, &sum) })
		if err != nil {
			var ae *AuditError
			if errors.As(err, &ae) {
				return sum, err
			}
			return sum, fmt.Errorf("ledger: audit chain %s: %w", c.Chain, err)
		}
		sum.Chains++
	}
	// The chains hold every entry unchanged, but an entry's key is not
	// hashed: one that no longer leads to it would hide the entry from
	// its GUID's history.
	var lost struct {
		chain nullString
		seq   nullInt
	}
	err = l.st.read().queryRow(ctx, sqlUnfindable).Scan(&lost.chain, &lost.seq)
	switch {
	case err == nil:
		return sum, &AuditError{Chain: lost.chain.String, Seq: lost.seq.Int64,
			Why: "entry cannot be found from its GUID: its key is neither its row's nor that of an entry that ended a row of the GUID (key changed?)"}
	case !errors.Is(err, errNoRows):
		return sum, fmt.Errorf("ledger: audit history keys: %w", err)
	}
	return sum, nil
}

// sqlUnfindable is the first entry sqlHistoryOf would not find: one with a
// key that is neither its row's nor that of an entry that ended a row of
// its GUID. One statement, so one snapshot: a row and its entries change
// in one transaction.
const sqlUnfindable = `SELECT chain, seq FROM history h WHERE hist_key IS NOT NULL
AND NOT EXISTS (SELECT 1 FROM tx WHERE tx.guid = h.guid AND tx.hist_key = h.hist_key)
AND NOT EXISTS (SELECT 1 FROM history e WHERE e.guid = h.guid AND (e.hist_key IS NULL OR e.state_after = '') AND e.hist_key = h.hist_key)
ORDER BY chain, seq LIMIT 1`

// auditChain checks one chain in the snapshot q.
func auditChain(ctx context.Context, q querier, name string, sum *AuditSummary) error {
	var c Chain
	if err := q.queryRow(ctx, `SELECT head_seq, head_hash, cut_seq, cut_hash FROM history_chain WHERE chain = ?`, name).
		Scan(&c.Seq, &c.Hash, &c.CutSeq, &c.CutHash); err != nil {
		return err
	}
	seq, prev := c.CutSeq, c.CutHash
	for {
		rows, err := q.query(ctx, `SELECT `+historyColumns+` FROM history WHERE chain = ? AND seq > ? ORDER BY seq LIMIT ?`, name, seq, auditPage)
		if err != nil {
			return err
		}
		n := 0
		for rows.Next() {
			e, err := scanEntry(rows)
			if err != nil {
				rows.Close()
				return err
			}
			n++
			fail := func(why string) error {
				rows.Close()
				return &AuditError{Chain: name, Seq: e.Seq, GUID: e.GUID, Why: why}
			}
			switch {
			case e.Seq != seq+1:
				rows.Close()
				return &AuditError{Chain: name, Seq: seq + 1, Why: fmt.Sprintf("missing (the next entry is %d): removed", e.Seq)}
			case e.Seq > c.Seq:
				return fail(fmt.Sprintf("beyond the chain's head %d: inserted", c.Seq))
			case e.PrevHash != prev:
				return fail("does not link to the entry before it (prev_hash differs): entries removed, inserted or reordered")
			case entryHash(&e) != e.Hash:
				return fail("its content does not match its hash: edited")
			}
			seq, prev = e.Seq, e.Hash
			sum.Entries++
			if strings.HasPrefix(e.Reason, ConflictReason) {
				sum.ConflictCount++
				if len(sum.Conflicts) < MaxAuditConflicts {
					sum.Conflicts = append(sum.Conflicts, e)
				}
			}
			if sum.First.IsZero() || e.At.Before(sum.First) {
				sum.First = e.At
			}
			if e.At.After(sum.Last) {
				sum.Last = e.At
			}
		}
		if err := rows.Err(); err != nil {
			rows.Close()
			return err
		}
		rows.Close()
		if n < auditPage {
			break
		}
	}
	switch {
	case seq < c.Seq:
		return &AuditError{Chain: name, Seq: seq + 1, Why: fmt.Sprintf("missing: the chain's head is entry %d (the last entries removed)", c.Seq)}
	case prev != c.Hash:
		return &AuditError{Chain: name, Seq: seq, Why: "the chain's head hash differs from its last entry's"}
	}
	return nil
}

// ScanChain calls fn with every entry of one chain still in the history,
// in sequence order, reading auditPage entries per query (for a verifier
// that checks more than the chain, e.g. that each GUID's entries follow
// one another). fn is called between queries.
func (l *Ledger) ScanChain(ctx context.Context, chain string, fn func(Entry) error) error {
	var after int64
	for {
		rows, err := l.st.read().query(ctx, `SELECT `+historyColumns+` FROM history WHERE chain = ? AND seq > ? ORDER BY seq LIMIT ?`, chain, after, auditPage)
		if err != nil {
			return fmt.Errorf("ledger: scan chain %s: %w", chain, err)
		}
		var page []Entry
		for rows.Next() {
			e, err := scanEntry(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("ledger: scan chain %s: %w", chain, err)
			}
			page = append(page, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("ledger: scan chain %s: %w", chain, err)
		}
		for _, e := range page {
			if err := fn(e); err != nil {
				return err
			}
		}
		if len(page) < auditPage {
			return nil
		}
		after = page[len(page)-1].Seq
	}
}

// Verify reports whether e's Hash is the hash of its content (it does not
// check e's place in its chain: Audit does).
func (e Entry) Verify() bool { return entryHash(&e) == e.Hash }
