package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"lhrelay/internal/app"
	"lhrelay/internal/ledger"
)

// historyEntry is one entry as history --json prints it.
type historyEntry struct {
	At          string `json:"at"`
	GUID        string `json:"guid"`
	StateBefore string `json:"stateBefore"`
	RspBefore   string `json:"rspBefore"`
	StateAfter  string `json:"stateAfter"`
	RspAfter    string `json:"rspAfter"`
	Attempts    int    `json:"attempts"`
	Reason      string `json:"reason"`
	HTTPStatus  int    `json:"httpStatus,omitempty"`
	TookMs      int64  `json:"tookMs,omitempty"`
	Command     string `json:"command"`
	Host        string `json:"host"`
	PID         int    `json:"pid"`
	Chain       string `json:"chain"`
	Seq         int64  `json:"seq"`
	Hash        string `json:"hash"`
}

// printHistory prints a GUID's entries, oldest first: when, the change, why,
// and who.
func printHistory(out io.Writer, guid string, es []ledger.Entry, asJSON bool) error {
	if asJSON {
		v := make([]historyEntry, len(es))
		for i, e := range es {
			v[i] = historyEntry{e.At.UTC().Format(time.RFC3339Nano), e.GUID, string(e.StateBefore), e.RspBefore,
				string(e.StateAfter), e.RspAfter, e.Attempts, e.Reason, e.HTTPStatus, e.Took.Milliseconds(),
				e.Command, e.Host, e.PID, e.Chain, e.Seq, e.Hash}
		}
		return writeJSON(out, v)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "history of %s (%d entries, oldest first; times UTC)\n", guid, len(es))
	fmt.Fprintln(tw, "AT\tCHANGE\tATTEMPTS\tWHY\tBY")
	for _, e := range es {
		why := e.Reason
		var call []string
		if e.HTTPStatus != 0 {
			call = append(call, fmt.Sprintf("HTTP %d", e.HTTPStatus))
		}
		if e.Took > 0 {
			call = append(call, e.Took.Round(time.Millisecond).String())
		}
		if len(call) > 0 {
			why += " (" + strings.Join(call, ", ") + ")"
		}
		fmt.Fprintf(tw, "%s\t%s → %s\t%d\t%s\t%s on %s pid %d (%s #%d)\n",
			e.At.UTC().Format("2006-01-02 15:04:05.000"), side(e.StateBefore, e.RspBefore), side(e.StateAfter, e.RspAfter),
			e.Attempts, why, e.Command, e.Host, e.PID, e.Chain, e.Seq)
	}
	return tw.Flush()
}

// side is one side of a change: STATE/CODE, or "none" for no row.
func side(s ledger.State, rsp string) string {
	if s == "" {
		return "none"
	}
	if rsp == "" {
		return string(s)
	}
	return string(s) + "/" + rsp
}

// runAudit checks every chain; a break is exit status 1 naming the entry.
func runAudit(ctx context.Context, l *ledger.Ledger, out io.Writer) error {
	s, err := l.Audit(ctx)
	var ae *ledger.AuditError
	if errors.As(err, &ae) {
		return fmt.Errorf("audit: %s: %w", l.Path(), err)
	}
	if err != nil {
		return app.Bad(err)
	}
	span := "no entries"
	if s.Entries > 0 {
		span = fmt.Sprintf("first %s, last %s UTC", s.First.UTC().Format("2006-01-02 15:04:05"), s.Last.UTC().Format("2006-01-02 15:04:05"))
	}
	if _, err = fmt.Fprintf(out, "audit: ok: %d chains, %d entries, %s\n", s.Chains, s.Entries, span); err != nil {
		return err
	}
	// Conflicts verify (they are entries like any other) but ask for a
	// person: each is a transfer that may have been posted twice.
	for _, e := range s.Conflicts {
		fmt.Fprintf(out, "audit: conflict: %s at %s UTC: %s\n", e.GUID, e.At.UTC().Format("2006-01-02 15:04:05"), e.Reason)
	}
	if more := s.ConflictCount - int64(len(s.Conflicts)); more > 0 {
		fmt.Fprintf(out, "audit: and %d conflicts more\n", more)
	}
	return nil
}
