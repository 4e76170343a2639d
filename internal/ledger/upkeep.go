package ledger

import (
	"context"
	"fmt"
	"time"
)

// historyChunk is how many entries of one chain one transaction of
// PurgeHistory removes.
const historyChunk = 1000

// PurgeHistory removes the history entries more than age old, by the
// database's clock (SPEC 6a), and returns how many. A chain loses a prefix:
// its entries up to the last one that old, and its cut moves to that entry in the same transaction, so
// the first entry left still verifies. Each transaction also records, in
// this Ledger's own chain, a note saying reason and which entries of which
// chain went: a gap in the history is explained, not suspicious. Two runs
// at once (PostgreSQL) never remove the same entries: the cut moves by a
// conditional UPDATE.
func (l *Ledger) PurgeHistory(ctx context.Context, age time.Duration, reason string) (int64, error) {
	if age <= 0 || reason == "" {
		return 0, fmt.Errorf("ledger: purge history: an age and a reason are required")
	}
	chains, err := l.Chains(ctx)
	if err != nil {
		return 0, fmt.Errorf("ledger: purge history: %w", err)
	}
	d := l.st.dialect()
	var total int64
	for _, c := range chains {
		for {
			var n int64
			err := l.st.do(ctx, operation{run: opFunc(func(tx stmts) error {
				n = 0
				var cut int64
				if err := tx.queryRow(`SELECT cut_seq FROM history_chain WHERE chain = ?`, c.Chain).Scan(&cut); err != nil {
					return fmt.Errorf("read cut: %w", err)
				}
				// Never past the head the chain had when this purge began:
				// its own notes are not for it to remove.
				var k nullInt
				cond, arg := d.historyOlderThan(age)
				err := tx.queryRow(`SELECT MAX(seq) FROM history WHERE chain = ? AND seq > ? AND seq <= ? AND `+cond,
					c.Chain, cut, min(cut+historyChunk, c.Seq), arg).Scan(&k)
				if err != nil || !k.Valid {
					return err
				}
				var hash string
				if err := tx.queryRow(`SELECT hash FROM history WHERE chain = ? AND seq = ?`, c.Chain, k.Int64).Scan(&hash); err != nil {
					return fmt.Errorf("read entry %d: %w", k.Int64, err)
				}
				moved, err := tx.exec(`UPDATE history_chain SET cut_seq = ?, cut_hash = ? WHERE chain = ? AND cut_seq = ?`, k.Int64, hash, c.Chain, cut)
				if err != nil || moved == 0 {
					return err // another purge moved it first: it removes these
				}
				n, err = tx.exec(`DELETE FROM history WHERE chain = ? AND seq > ? AND seq <= ?`, c.Chain, cut, k.Int64)
				if err != nil {
					return err
				}
				tx.note(pending{why: Why{Reason: fmt.Sprintf("%s: history of chain %s entries %d to %d removed (%d entries)", reason, c.Chain, cut+1, k.Int64, n)}})
				return nil
			})})
			if err != nil {
				l.countError(opPurge, err)
				return total, fmt.Errorf("ledger: purge history of chain %s: %w", c.Chain, err)
			}
			total += n
			if n == 0 {
				break
			}
		}
	}
	return total, nil
}

// copyHistory copies every chain of from's history into l as it is
// (entries keep their chains, sequence numbers and hashes, so they verify
// in l as they did in from); entries l already holds are left as they are.
// It returns how many entries it inserted.
func (l *Ledger) copyHistory(ctx context.Context, from *Ledger) (int64, error) {
	chains, err := from.Chains(ctx)
	if err != nil {
		return 0, err
	}
	d := l.st.dialect()
	var total int64
	for _, c := range chains {
		err := l.st.do(ctx, operation{run: opFunc(func(tx stmts) error {
			_, err := tx.exec(`INSERT INTO history_chain(chain, command, host, pid, started_at, head_seq, head_hash, cut_seq, cut_hash)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (chain) DO NOTHING`,
				c.Chain, c.Command, c.Host, c.PID, d.atArg(c.StartedAt), c.Seq, c.Hash, c.CutSeq, c.CutHash)
			return err
		})})
		if err != nil {
			return total, fmt.Errorf("chain %s: %w", c.Chain, err)
		}
		seq := c.CutSeq
		for {
			rows, err := from.st.read().query(ctx, `SELECT `+historyColumns+` FROM history WHERE chain = ? AND seq > ? ORDER BY seq LIMIT ?`, c.Chain, seq, copyPage)
			if err != nil {
				return total, fmt.Errorf("chain %s: %w", c.Chain, err)
			}
			var es []Entry
			for rows.Next() {
				e, err := scanEntry(rows)
				if err != nil {
					rows.Close()
					return total, fmt.Errorf("chain %s: %w", c.Chain, err)
				}
				es = append(es, e)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return total, fmt.Errorf("chain %s: %w", c.Chain, err)
			}
			if len(es) == 0 {
				break
			}
			var n int64
			err = l.st.do(ctx, operation{run: opFunc(func(tx stmts) error {
				n = 0
				for _, q := range historyInserts(d, es, nil) {
					k, err := tx.exec(q.q+` ON CONFLICT (chain, seq) DO NOTHING`, q.args...)
					if err != nil {
						return err
					}
					n += k
				}
				return nil
			})})
			if err != nil {
				return total, fmt.Errorf("chain %s: %w", c.Chain, err)
			}
			total += n
			seq = es[len(es)-1].Seq
		}
	}
	return total, nil
}
