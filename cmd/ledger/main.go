// Command ledger inspects a relay ledger without changing it:
//
//	ledger show  --db PATH [--json] GUID
//	ledger list  --db PATH [--state S] [--older-than SECONDS] [--max-rows N] [--json]
//	ledger stats --db PATH [--json]
//	ledger backup --db PATH --to FILE
//	ledger copy  --from PATH|URL --to PATH|URL
//	ledger history --db PATH [--json] GUID
//	ledger audit --db PATH
//	ledger serve --db PATH [--listen HOST:PORT] [--tls-cert F --tls-key F] [--tls-client-ca F] [--token-file F] [--show-accounts]
//
// show decodes the stored request and response frames through the generated
// layouts; list selects rows by state and age; stats counts rows by state and
// response code and names the oldest UNKNOWN and SENT rows, the ones an
// operator must settle. backup writes an online, consistent copy of a live
// SQLite ledger (SQLite's backup API) to a new file while relays keep
// writing; for a PostgreSQL ledger, pg_dump is the tool. copy moves an
// installation from one host's SQLite file to a PostgreSQL ledger shared by
// several relays (or back): it copies every row as it is, never overwrites
// a GUID the target already holds, and may be run again; stop the relays
// writing to --from first. It copies the history too, as it is, and adds an
// entry for each row it copied. history prints a GUID's history entries,
// oldest first (SPEC 6b); audit checks every history chain and exits 1
// naming the first entry that does not verify. serve is the operator's
// console (package console): a read-only web page per question an operator
// is asked, on loopback unless TLS and client certificates or tokens guard
// it.
//
// --db (and --from, --to) takes a SQLite file path or a postgres:// URL.
// Exit status: 0 on success, 1 when a GUID is not found, a backup failed or
// copy found conflicting rows or audit a break in the history, 2 for bad arguments or a missing or unusable
// database.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"lhrelay/internal/app"
	"lhrelay/internal/cliflag"
	"lhrelay/internal/ledger"
)

const usage = `usage:
  ledger show  --db PATH [--json] GUID
  ledger list  --db PATH [--state S] [--older-than SECONDS] [--max-rows N] [--json]
  ledger stats --db PATH [--json]
  ledger backup --db PATH --to FILE
  ledger copy  --from PATH|URL --to PATH|URL
  ledger history --db PATH [--json] GUID
  ledger audit --db PATH
  ledger serve --db PATH [--listen HOST:PORT] [--tls-cert F --tls-key F] [--tls-client-ca F] [--token-file F] [--show-accounts]

--db, --from and --to take a SQLite file path or a postgres:// URL.`

func main() {
	app.Main(func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		return app.Report(stderr, "ledger", run(ctx, args, stdout, time.Now()))
	})
}

func run(ctx context.Context, args []string, out io.Writer, now time.Time) error {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		fmt.Fprintln(out, cliflag.Version("ledger"))
		return nil
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(out, usage)
		if len(args) == 0 {
			return app.Badf("missing command (show, list, stats, backup, copy, history, audit or serve)")
		}
		return nil
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "copy":
		return runCopy(ctx, args, out)
	case "serve":
		return runServe(ctx, args, out)
	}
	fs := flag.NewFlagSet("ledger "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	db := fs.String("db", "", "ledger: SQLite `file` or postgres:// URL (required)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	var state string
	var olderThan time.Duration
	var limit int
	var to string
	switch cmd {
	case "show", "stats", "history", "audit":
	case "backup":
		fs.StringVar(&to, "to", "", "write the copy to this new `file` (required; an existing file is refused)")
	case "list":
		fs.StringVar(&state, "state", "", "only rows in this state (RECEIVED, SENT, DONE, UNKNOWN, FAILED)")
		cliflag.SecondsVar(fs, &olderThan, "older-than", 0, "only rows last updated at least this many `seconds` ago")
		fs.IntVar(&limit, "max-rows", 1000, "at most this many `rows` (0: all)")
	default:
		return app.Badf("unknown command %q (want show, list, stats, backup, copy, history, audit or serve)", cmd)
	}
	args, err := cliflag.Read(fs, args, cliflag.Usage{Out: out, Text: usage + "\n\nflags of " + cmd + ":\n"})
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return app.Badf("%s: %v", cmd, err)
	}
	if *db == "" {
		return app.Badf("%s: --db is required", cmd)
	}
	takesGUID := cmd == "show" || cmd == "history"
	if takesGUID && len(args) != 1 {
		return app.Badf("%s: want exactly one GUID, got %d arguments", cmd, len(args))
	}
	if !takesGUID && len(args) != 0 {
		return app.Badf("%s: unexpected argument %q", cmd, args[0])
	}
	if state != "" && !ledger.State(state).Valid() {
		return app.Badf("list: --state %q is not a ledger state (RECEIVED, SENT, DONE, UNKNOWN, FAILED)", state)
	}
	if cmd == "backup" && to == "" {
		return app.Badf("backup: --to is required")
	}
	if limit < 0 {
		return app.Badf("list: --max-rows must not be negative")
	}

	l, err := ledger.OpenExisting(*db, ledger.WithActor(ledger.NewActor("ledger "+cmd)))
	if err != nil {
		return app.Badf("%s: --db: %w", cmd, err)
	}
	defer l.Close()

	switch cmd {
	case "history":
		es, err := l.History(ctx, args[0])
		if err != nil {
			return app.Bad(err)
		}
		if len(es) == 0 {
			return fmt.Errorf("history: no history entries for GUID %s in %s", args[0], l.Path())
		}
		return printHistory(out, args[0], es, *asJSON)
	case "audit":
		return runAudit(ctx, l, out)
	case "backup":
		size, err := l.Backup(ctx, to)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "backup: %s -> %s (%d bytes)\n", *db, to, size)
		return err
	case "show":
		row, err := l.Get(ctx, args[0])
		if errors.Is(err, ledger.ErrNotFound) {
			return fmt.Errorf("show: no row for GUID %s in %s", args[0], l.Path())
		}
		if err != nil {
			return app.Bad(err)
		}
		return printShow(out, describeRow(row), *asJSON)
	case "list":
		f := ledger.Filter{Limit: limit}
		if state != "" {
			f.States = []ledger.State{ledger.State(state)}
		}
		// By the database's clock, as resolve and purge select (SPEC 6a).
		f.OlderThan = olderThan
		// Rows are printed as they are read, a page at a time: --limit 0
		// on a ledger of millions of rows must not hold them all.
		lw := newListWriter(out, *asJSON)
		if err := l.Scan(ctx, f, lw.row); err != nil {
			return app.Bad(err)
		}
		return lw.end()
	default:
		st, err := l.Stats(ctx)
		if err != nil {
			return app.Bad(err)
		}
		return printStats(out, st, now, *asJSON)
	}
}

// listRow is one row of list's output.
type listRow struct {
	GUID      string `json:"guid"`
	TxCode    string `json:"txCode"`
	State     string `json:"state"`
	RspCode   string `json:"rspCode"`
	Attempts  int    `json:"attempts"`
	UpdatedAt string `json:"updatedAt"`
}

// summarize gives a row's columns as list prints them.
func summarize(r ledger.Row) listRow {
	return listRow{r.GUID, r.TxCode, string(r.State), r.RspCode, r.Attempts, formatTime(r.UpdatedAt)}
}

// listWriter prints list's rows one by one: a JSON array, or text in
// fixed-width columns (a GUID is 32 characters, a TX_CODE 8, a state at
// most 8), so nothing has to be held to align them.
type listWriter struct {
	out    *bufio.Writer // keeps the first write error for Flush
	asJSON bool
	n      int // rows written
}

const listTextRow = "%-32s  %-8s  %-8s  %-4s  %-8v  %s\n"

func newListWriter(out io.Writer, asJSON bool) *listWriter {
	return &listWriter{out: bufio.NewWriter(out), asJSON: asJSON}
}

func (w *listWriter) row(r ledger.Row) error {
	lr := summarize(r)
	switch {
	case w.asJSON:
		b, err := json.MarshalIndent(lr, "  ", "  ")
		if err != nil {
			return err
		}
		sep := ",\n  "
		if w.n == 0 {
			sep = "[\n  "
		}
		w.out.WriteString(sep)
		w.out.Write(b)
	default:
		if w.n == 0 {
			w.header()
		}
		fmt.Fprintf(w.out, listTextRow, lr.GUID, lr.TxCode, lr.State, dash(lr.RspCode), lr.Attempts, lr.UpdatedAt)
	}
	w.n++
	return nil
}

// end closes the array or prints the row count, and flushes.
func (w *listWriter) end() error {
	switch {
	case w.asJSON && w.n == 0:
		w.out.WriteString("[]\n")
	case w.asJSON:
		w.out.WriteString("\n]\n")
	default:
		if w.n == 0 {
			w.header()
		}
		fmt.Fprintf(w.out, "(%d %s)\n", w.n, plural(w.n, "row", "rows"))
	}
	return w.out.Flush()
}

func (w *listWriter) header() {
	fmt.Fprintf(w.out, listTextRow, "GUID", "TX_CODE", "STATE", "RSP", "ATTEMPTS", "UPDATED_AT (UTC)")
}

// statsOut is stats' JSON output.
type statsOut struct {
	Total         int64            `json:"total"`
	ByState       map[string]int64 `json:"byState"`
	ByCode        []codeCount      `json:"byCode"`
	OldestUnknown string           `json:"oldestUnknown,omitempty"`
	OldestSent    string           `json:"oldestSent,omitempty"`
}

type codeCount struct {
	State   string `json:"state"`
	RspCode string `json:"rspCode"`
	Meaning string `json:"meaning"`
	Count   int64  `json:"count"`
}

func printStats(out io.Writer, st ledger.StateCounts, now time.Time, asJSON bool) error {
	s := statsOut{Total: st.Total, ByState: map[string]int64{}}
	for _, state := range ledger.States {
		s.ByState[string(state)] = st.ByState[state]
	}
	for _, c := range st.ByCode {
		s.ByCode = append(s.ByCode, codeCount{string(c.State), c.RspCode, meaning(c.RspCode), c.Count})
	}
	if !st.OldestUnknown.IsZero() {
		s.OldestUnknown = formatTime(st.OldestUnknown)
	}
	if !st.OldestSent.IsZero() {
		s.OldestSent = formatTime(st.OldestSent)
	}
	if asJSON {
		return writeJSON(out, s)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tROWS")
	for _, state := range ledger.States {
		fmt.Fprintf(tw, "%s\t%d\n", state, s.ByState[string(state)])
	}
	fmt.Fprintf(tw, "total\t%d\n\n", s.Total)
	fmt.Fprintln(tw, "STATE\tRSP\tROWS\tMEANING")
	for _, c := range s.ByCode {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", c.State, dash(c.RspCode), c.Count, c.Meaning)
	}
	fmt.Fprintln(tw)
	for _, o := range []struct {
		what string
		at   time.Time
		hint string
	}{
		{"oldest UNKNOWN", st.OldestUnknown, "a relay with --settle-every settles it by itself; else run resolve"},
		{"oldest SENT", st.OldestSent, "a relay may have died mid-call: resolve --stale-sent"},
	} {
		if o.at.IsZero() {
			fmt.Fprintf(tw, "%s:\tnone\n", o.what)
			continue
		}
		fmt.Fprintf(tw, "%s:\t%s UTC (%s ago; %s)\n", o.what, formatTime(o.at), now.Sub(o.at).Round(time.Second), o.hint)
	}
	return tw.Flush()
}

func printShow(out io.Writer, d rowDetail, asJSON bool) error {
	if asJSON {
		return writeJSON(out, d)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "GUID\t%s\n", d.GUID)
	fmt.Fprintf(tw, "TX_CODE\t%s\n", d.TxCode)
	fmt.Fprintf(tw, "STATE\t%s\n", d.State)
	fmt.Fprintf(tw, "RSP_CODE\t%s\t%s\n", dash(d.RspCode), meaning(d.RspCode))
	fmt.Fprintf(tw, "ATTEMPTS\t%d\n", d.Attempts)
	fmt.Fprintf(tw, "UPDATED_AT\t%s UTC\n", d.UpdatedAt)
	for _, f := range []*frameDetail{d.Request, d.Response} {
		if f == nil {
			continue
		}
		fmt.Fprintf(tw, "\n%s frame\t(%d bytes)\n", f.Role, f.Bytes)
		for _, kv := range f.Header {
			fmt.Fprintf(tw, "  %s\t%s\n", kv.Name, kv.Value)
		}
		for _, kv := range f.Body {
			fmt.Fprintf(tw, "  %s\t%s\n", kv.Name, kv.Value)
		}
		if f.Error != "" {
			fmt.Fprintf(tw, "  (cannot decode:\t%s)\n", f.Error)
			fmt.Fprintf(tw, "  raw\t%q\n", f.Raw)
		}
	}
	if d.Response == nil {
		fmt.Fprintf(tw, "\nresponse frame\tnone stored yet\n")
	}
	return tw.Flush()
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") }

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}

// plural is one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
