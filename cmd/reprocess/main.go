// Command reprocess resends the requests that definitely never reached the
// core (SPEC §7):
//
//	reprocess --db PATH --core URL --max-attempts N [--dry-run] [--trust-lookup-404] [--max-inflight N] [--rate ROWS]
//
// Only rows in FAILED with E902 and fewer than N attempts are selected. Each
// is first looked up at the core by its transaction's own lookup, as
// resolve does: a row the core posted (a lookup that came too early made it
// FAILED while its call was under way) becomes DONE/0000 from the lookup
// and is not sent (posted_already); one it never posted (a 404 trusted as
// resolve trusts it, --trust-lookup-404 included) is re-claimed
// (SENT, attempts+1) with a conditional update, sent with its stored
// request and GUID, and its outcome recorded exactly as the relay records
// it. A read (no lookup declared) is sent without one. UNKNOWN rows are
// never sent: their transfer may have been posted; resolve settles them.
// When the core cannot be reached for a row, the run stops there: that row
// is unchanged (or, if only its resend failed, has spent one attempt), the
// rest are untouched (not_tried). Rows that have used up their attempts are counted
// (exhausted) on every run: someone must decide about them. Exit status 0
// when every row was handled, 1 when the core could not be reached, 2 for
// bad arguments or an unusable database.
//
// Rows go oldest first by the time each was first claimed, many at a time:
// at most --max-inflight core calls at once (default 16), admitted as the
// relay admits its own, and at most --rate rows started a second when
// given. On a terminal a progress line shows rows done of those selected,
// rows a second, the outcomes so far and the time left.
package main

import (
	"context"
	"io"
	"os"
	"time"

	"lhrelay/internal/app"
	"lhrelay/internal/app/batchcmd"
	"lhrelay/internal/batch"
)

func main() { batchcmd.Main("reprocess", run) }

func run(ctx context.Context, c *batchcmd.Command, args []string, stdout io.Writer) (*batch.Summary, error) {
	core := c.AddCoreFlags()
	maxAttempts := c.Flags.Int("max-attempts", 0, "resend only rows with fewer attempts than this (required, at least 2)")
	dryRun := c.Flags.Bool("dry-run", false, "list what would be resent and change nothing")
	if err := c.Parse(args, stdout); err != nil {
		return nil, err
	}
	if *maxAttempts < 2 {
		return nil, app.Badf("--max-attempts is required and must be at least 2 (a row's first attempt is 1)")
	}
	l, client, err := c.Connect(core)
	if err != nil {
		return nil, err
	}
	pace, err := core.Pace()
	if err != nil {
		l.Close()
		return nil, err
	}
	defer l.Close()
	return batch.Reprocess(ctx, l, client, batch.ReprocessConfig{
		MaxAttempts: *maxAttempts, DryRun: *dryRun, Now: time.Now(), Out: stdout, Pace: pace, Progress: batchcmd.Progress(os.Stderr, "reprocess"), Log: c.Logger(),
		Guard: core.Guard(),
	})
}
