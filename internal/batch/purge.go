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
	Days   int
	DryRun bool
	Now    time.Time
	Out    io.Writer // the dry run's listing
}

// Purge deletes DONE rows last updated more than Days days ago: past that
// window a retry of their GUID is no longer recognised (the idempotency
// window). UNKNOWN, FAILED, SENT and RECEIVED rows stay, however old: they
// are unsettled money. With DryRun it lists the rows it would delete and
// changes nothing.
func Purge(ctx context.Context, l *ledger.Ledger, cfg PurgeConfig) (*Summary, error) {
	s := NewSummary("purge", "deleted")
	s.DryRun = cfg.DryRun
	before := cfg.Now.Add(-time.Duration(cfg.Days) * 24 * time.Hour)
	if cfg.DryRun {
		// PurgeDone deletes updated_at < before at whole seconds; List
		// selects updated_at <= its bound, so one second less lists the
		// same rows.
		err := l.Scan(ctx, ledger.Filter{States: []ledger.State{ledger.StateDone}, UpdatedBefore: before.Add(-time.Second)}, func(r ledger.Row) error {
			_, err := fmt.Fprintf(cfg.Out, "would delete %s %s %s updated %s UTC\n", r.GUID, r.TxCode, r.RspCode, r.UpdatedAt.UTC().Format(time.DateTime))
			return err
		})
		if err != nil {
			return s, fmt.Errorf("purge: list: %w", err)
		}
	}
	n, err := l.PurgeDone(ctx, before, cfg.DryRun)
	s.AddN("deleted", int(n))
	if err != nil {
		return s, fmt.Errorf("purge: %w", err)
	}
	return s, nil
}
