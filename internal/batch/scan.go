package batch

import (
	"context"

	"lhrelay/internal/ledger"
)

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
