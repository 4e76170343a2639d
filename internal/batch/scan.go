package batch

import (
	"context"
	"fmt"

	"lhrelay/internal/ledger"
)

// scanOnce calls fn with each row f selects, oldest first, through
// ledger.Scan: one page of rows in memory at a time however large the
// selection. A row already in seen is skipped and every row yielded is
// added to it: a row this run changed can come back in a later page while
// it still matches f (a resend that failed again is FAILED E902 once more),
// and it is for the next run, not this one. fn's error stops the scan and
// is returned as it is; a failed read is returned as "select rows: …".
func scanOnce(ctx context.Context, l *ledger.Ledger, f ledger.Filter, seen map[string]struct{}, fn func(ledger.Row) error) error {
	var fnErr error
	err := l.Scan(ctx, f, func(r ledger.Row) error {
		if _, ok := seen[r.GUID]; ok {
			return nil
		}
		seen[r.GUID] = struct{}{}
		if err := ctx.Err(); err != nil {
			fnErr = fmt.Errorf("stopped: %w", err)
		} else {
			fnErr = fn(r)
		}
		return fnErr
	})
	if err != nil && fnErr == nil {
		return fmt.Errorf("select rows: %w", err)
	}
	return err
}

// countAll adds up how many rows the filters select, for a progress bar.
func countAll(ctx context.Context, l *ledger.Ledger, fs ...ledger.Filter) (int, error) {
	total := 0
	for _, f := range fs {
		n, err := l.Count(ctx, f)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}
