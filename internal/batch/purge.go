package batch

import (
	"context"
	"fmt"
	"io"
	"time"

	"lhrelay/internal/ledger"
)

// PurgeConfig is what purge needs.
type PurgeConfig struct {
	// Days: DONE rows older than this many days by the database's clock
	// are deleted; at least MinPurgeDays.
	Days int
	// HistoryDays: history entries more than this many days old, by the
	// database's clock, are removed (0: the history is left alone).
	HistoryDays int
	DryRun      bool
	Out         io.Writer // the dry run's listing
}

// MinPurgeDays is the shortest idempotency window purge accepts (SPEC 7): a
// GUID forgotten while its channel may still retry it would be posted
// again.
const MinPurgeDays = 1

// ErrWindowTooShort refuses a purge window under MinPurgeDays: a setting
// to correct, not a run that failed.
var ErrWindowTooShort = fmt.Errorf("want at least %d day: a GUID forgotten while its channel may still retry it would be posted again", MinPurgeDays)

// Purge deletes DONE rows last updated more than Days days ago: past that
// window a retry of their GUID is no longer recognised (the idempotency
// window). UNKNOWN, FAILED, SENT and RECEIVED rows stay, however old: they
// are unsettled money. With DryRun it lists the rows it would delete and
// changes nothing. Each deleted row's history stays, with an entry saying
// it was purged; with HistoryDays the entries older than that go, and the
// history records that they did.
func Purge(ctx context.Context, l *ledger.Ledger, cfg PurgeConfig) (*Summary, error) {
	outcomes := []string{"deleted"}
	if !cfg.DryRun && cfg.HistoryDays > 0 {
		outcomes = append(outcomes, "history_deleted")
	}
	s := NewSummary("purge", outcomes...)
	s.DryRun = cfg.DryRun
	if cfg.Days < MinPurgeDays {
		return s, fmt.Errorf("purge: --days %d: %w", cfg.Days, ErrWindowTooShort)
	}
	age := time.Duration(cfg.Days) * 24 * time.Hour
	if cfg.DryRun {
		err := l.Scan(ctx, ledger.Filter{States: []ledger.State{ledger.StateDone}, OlderThan: age}, func(r ledger.Row) error {
			_, err := fmt.Fprintf(cfg.Out, "would delete %s %s %s updated %s UTC\n", r.GUID, r.TxCode, r.RspCode, r.UpdatedAt.UTC().Format(time.DateTime))
			return err
		})
		if err != nil {
			return s, fmt.Errorf("purge: list: %w", err)
		}
	}
	n, err := l.PurgeDone(ctx, age, cfg.DryRun, fmt.Sprintf("purged after %d days", cfg.Days))
	s.AddN("deleted", int(n))
	if err != nil {
		return s, fmt.Errorf("purge: %w", err)
	}
	if cfg.DryRun || cfg.HistoryDays <= 0 {
		return s, nil
	}
	h, err := l.PurgeHistory(ctx, time.Duration(cfg.HistoryDays)*24*time.Hour, fmt.Sprintf("history purged after %d days", cfg.HistoryDays))
	s.AddN("history_deleted", int(h))
	if err != nil {
		return s, fmt.Errorf("purge: %w", err)
	}
	return s, nil
}
