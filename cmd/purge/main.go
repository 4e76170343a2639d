// Command purge deletes settled (DONE) ledger rows last updated more than
// --days days ago. Rows in every other state stay, however old.
//
//	purge --db PATH --days N [--history-days N] [--dry-run]
//
// The rows' history stays (SPEC 6b): --history-days (default 400, a year
// of audit trail and some margin) removes history entries older than
// that, and records in the history that it did.
//
// Purging sets the idempotency window: a channel retrying a GUID whose row
// was purged is treated as a new transfer. Keep --days well beyond the
// longest time a channel may retry.
package main

import (
	"context"
	"io"

	"lhrelay/internal/app"
	"lhrelay/internal/app/batchcmd"
	"lhrelay/internal/batch"
)

func main() { batchcmd.Main("purge", run) }

func run(ctx context.Context, c *batchcmd.Command, args []string, stdout io.Writer) (*batch.Summary, error) {
	fs := c.Flags
	days := fs.Int("days", 0, "delete DONE rows last updated more than this many days ago by the database's clock (required, at least 1)")
	historyDays := fs.Int("history-days", 400, "delete history entries more than this many days old by the database's clock (at least 1)")
	dryRun := fs.Bool("dry-run", false, "list what would be deleted and change nothing")
	if err := c.Parse(args, stdout); err != nil {
		return nil, err
	}
	if *days < batch.MinPurgeDays {
		// Refused before the ledger is opened: nothing is deleted.
		return nil, app.Badf("--days is required and must be a whole number of days, at least %d: a GUID forgotten while its channel may still retry it would be posted again", batch.MinPurgeDays)
	}
	if *historyDays < 1 {
		return nil, app.Badf("--history-days must be a whole number of days, 1 or more")
	}
	l, err := c.Open()
	if err != nil {
		return nil, err
	}
	defer l.Close()
	return batch.Purge(ctx, l, batch.PurgeConfig{Days: *days, HistoryDays: *historyDays, DryRun: *dryRun, Out: stdout})
}
