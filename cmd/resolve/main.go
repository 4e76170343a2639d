// Command resolve settles ledger rows whose result is unknown by asking the
// core, and never POSTs (SPEC §7):
//
//	resolve --db PATH --core URL --min-age SECONDS [--stale-sent SECONDS] [--guid GUID[,GUID…]] [--trust-lookup-404] [--max-inflight N] [--rate ROWS]
//
// For each UNKNOWN row last updated at least --min-age seconds ago, and each
// SENT row older than --stale-sent (orphaned by a relay that died mid-call;
// default 600, 0 turns it off), it asks the lookup the row's own transaction
// declares in its layout (for a transfer, GET /v1/transfers/{guid}):
// 200 → DONE/0000 with a response frame built from the lookup, so the
// channel's retry is answered with it; 404 → FAILED/E902, safe to resend,
// unless the core answers a new GUID's lookup exactly as a path it does not
// serve and no lookup answered it 200, as a --core with a wrong path does
// (batch.LookupGuard: the rows stay and the run exits 1 naming --core;
// --trust-lookup-404 takes the operator's word for such a core); anything
// else → unchanged. A read declared "lookup none" becomes
// FAILED/E902 without a core call; a row of a TX_CODE this binary does not
// know is left unchanged (unknown_tx). --guid settles only the rows of the
// GUIDs it lists (the same rules, the same ages). Exit status 0 when every row was handled, 1 when
// the core could not be reached for some (they are unchanged: alert), 2 for
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
	"strings"
	"time"

	"lhrelay/internal/app"
	"lhrelay/internal/app/batchcmd"
	"lhrelay/internal/batch"
	"lhrelay/internal/cliflag"
)

func main() { batchcmd.Main("resolve", run) }

func run(ctx context.Context, c *batchcmd.Command, args []string, stdout io.Writer) (*batch.Summary, error) {
	core := c.AddCoreFlags()
	var minAge, staleSent time.Duration
	cliflag.SecondsVar(c.Flags, &minAge, "min-age", 0, "only UNKNOWN rows last updated at least this many `seconds` ago (required)")
	cliflag.SecondsVar(c.Flags, &staleSent, "stale-sent", 600*time.Second, "also settle SENT rows last updated at least this many `seconds` ago (0: off)")
	guids := c.Flags.String("guid", "", "only the rows of these `GUIDs` (comma-separated)")
	if err := c.Parse(args, stdout); err != nil {
		return nil, err
	}
	if !c.Given("min-age") {
		return nil, app.Badf("--min-age is required")
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
	return batch.Resolve(ctx, l, client, batch.ResolveConfig{
		MinAge: minAge, StaleSent: staleSent, Now: time.Now(), Pace: pace, Progress: batchcmd.Progress(os.Stderr, "resolve"), Log: c.Logger(),
		GUIDs: splitList(*guids), Guard: core.Guard(),
	})
}

// splitList is the comma-separated values of s, without empty ones.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
