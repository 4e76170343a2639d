package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

// report is what the demo prints.
type report struct {
	Steps   []step      `json:"steps"`
	Ledger  []ledgerRow `json:"ledger"`
	Core    []coreCount `json:"core"`
	Metrics []string    `json:"metrics"`
	// History is the slow transfer's history entries (SPEC 6b).
	History []historyLine `json:"history"`
	Checks  []check       `json:"checks"`
	OK      bool          `json:"ok"`
}

type ledgerRow struct {
	GUID     string       `json:"guid"`
	TxCode   string       `json:"tx_code"`
	State    ledger.State `json:"state"`
	RspCode  string       `json:"rsp_code"`
	Attempts int          `json:"attempts"`
}

// coreCount is the core's own view of one GUID: the POST /v1/transfers it
// received and the transfers it posted.
type coreCount struct {
	GUID   string `json:"guid"`
	Calls  int    `json:"calls"`
	Posted int    `json:"posted"`
}

// historyLine is one history entry as the demo shows it: without times
// and process ids, which differ at every run.
type historyLine struct {
	Change   string `json:"change"`
	Attempts int    `json:"attempts"`
	Why      string `json:"why"`
	By       string `json:"by"`
}

// slowGUID is the slow transfer's GUID, whose history the demo shows.
var slowGUID = demoGUID(11)

func historyOf(es []ledger.Entry) []historyLine {
	side := func(s ledger.State, rsp string) string {
		switch {
		case s == "":
			return "none"
		case rsp == "":
			return string(s)
		}
		return string(s) + "/" + rsp
	}
	out := make([]historyLine, len(es))
	for i, e := range es {
		out[i] = historyLine{side(e.StateBefore, e.RspBefore) + " → " + side(e.StateAfter, e.RspAfter), e.Attempts, e.Reason, e.Command}
	}
	return out
}

type check struct {
	Text string `json:"check"`
	OK   bool   `json:"ok"`
}

// report gathers the steps, the ledger, the core's statistics and the
// relay's metrics, and runs the final checks.
func (w *world) report(ctx context.Context) (*report, error) {
	r := &report{Steps: w.steps}
	rows, err := w.led.List(ctx, ledger.Filter{})
	if err != nil {
		return nil, err
	}
	sent := 0
	for _, row := range rows {
		r.Ledger = append(r.Ledger, ledgerRow{row.GUID, row.TxCode, row.State, row.RspCode, row.Attempts})
		if row.State == ledger.StateSent {
			sent++
		}
	}
	slices.SortFunc(r.Ledger, func(a, b ledgerRow) int { return strings.Compare(a.GUID, b.GUID) })

	stats := w.sim.Stats()
	twice, posted, disagree := 0, 0, 0
	for _, g := range slices.Sorted(maps.Keys(stats.ByGUID)) {
		c := coreCount{GUID: g, Calls: stats.ByGUID[g], Posted: w.sim.PostCount(g)}
		r.Core = append(r.Core, c)
		posted += c.Posted
		if c.Posted > 1 {
			twice++
		}
		if c.Calls != w.arrivals.count(g) {
			disagree++
		}
	}

	good := 0
	for _, s := range w.steps {
		if s.ok() {
			good++
		}
	}
	es, err := w.led.History(ctx, slowGUID)
	if err != nil {
		return nil, err
	}
	r.History = historyOf(es)
	audit, auditErr := w.led.Audit(ctx)
	auditText := fmt.Sprintf("the history verifies (ledger audit: %d chains, %d entries)", audit.Chains, audit.Entries)
	if auditErr != nil {
		auditText = fmt.Sprintf("the history verifies (ledger audit: %v)", auditErr)
	}

	r.Checks = []check{
		{fmt.Sprintf("every step got the expected answer (%d of %d)", good, len(w.steps)), good == len(w.steps)},
		{fmt.Sprintf("no GUID was posted twice (%d GUIDs reached the core, %d transfers posted)", len(r.Core), posted), twice == 0},
		{"the core's own call counts match the POSTs seen arriving", disagree == 0},
		{fmt.Sprintf("no ledger row left SENT (%d rows)", len(rows)), sent == 0},
		{auditText, auditErr == nil},
	}
	r.OK = true
	for _, c := range r.Checks {
		r.OK = r.OK && c.OK
	}

	r.Metrics, err = w.metricLines("lhrelay_frames_total", "lhrelay_ledger_rows")
	return r, err
}

// metricLines renders the relay's series of the named metrics as /metrics
// shows them.
func (w *world) metricLines(names ...string) ([]string, error) {
	mfs, err := w.m.Registry.Gather()
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, name := range names {
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, mt := range mf.GetMetric() {
				var labels []string
				for _, lp := range mt.GetLabel() {
					labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
				}
				v := mt.GetCounter().GetValue() + mt.GetGauge().GetValue()
				lines = append(lines, fmt.Sprintf("%s{%s} %g", name, strings.Join(labels, ","), v))
			}
		}
	}
	return lines, nil
}

func (r *report) writeJSON(out io.Writer) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func (r *report) writeText(out io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "LH-STD relay demo. In this process, on 127.0.0.1: the core simulator (a %s memo waits %s),\n", coresim.MemoSlow, slowDelay)
	fmt.Fprintf(&b, "the relay (--timeout %s, SQLite ledger) and a second relay on the same ledger whose core is down.\n", relayTimeout)
	fmt.Fprintf(&b, "Real frames over TCP. Transfers go from the %s account shown to %s %s.\n", bankOursCore, bankOtherCore, acctOther)
	fmt.Fprintf(&b, "ANSWER: the code and its meaning (for a batch step, the row's code afterwards). CORE: POSTs\n")
	fmt.Fprintf(&b, "for the GUID that reached the core. LEDGER: the GUID's row, state/attempts.\n\n")

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tSTEP\tGUID\tSENT\tANSWER\tCORE\tLEDGER\tCHECK")
	for _, s := range r.Steps {
		answer := string(s.Got) + " " + s.Got.Meaning()
		if s.Batch {
			answer = "row: " + answer
		}
		if s.Note != "" {
			answer += " (" + s.Note + ")"
		}
		verdict := "ok"
		if !s.ok() {
			verdict = "FAIL: " + strings.Join(s.Problems, "; ")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.N, s.Name, shortGUID(s.GUID), s.Sent, answer, s.CorePosts, stateText(s.State, s.Attempts), verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(&b, "\nLedger (the relay's idempotency record):\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  GUID\tTX\tSTATE\tRSP\tATTEMPTS")
	for _, row := range r.Ledger {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\n", row.GUID, row.TxCode, row.State, row.RspCode, row.Attempts)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(&b, "\nCore (its own statistics: %s %s received, transfers posted):\n", transferTx.Method, transferTx.Path)
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  GUID\tCALLS\tPOSTED")
	for _, c := range r.Core {
		fmt.Fprintf(tw, "  %s\t%d\t%d\n", c.GUID, c.Calls, c.Posted)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(&b, "\nHistory of the slow transfer %s (ledger history; the retry after resolve changed nothing, so it has no entry):\n", slowGUID)
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  CHANGE\tATTEMPTS\tWHY\tBY")
	for _, h := range r.History {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", h.Change, h.Attempts, h.Why, h.By)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(&b, "\nMetrics (non-zero series, as the relay's /metrics shows them):\n")
	for _, l := range r.Metrics {
		if !strings.HasSuffix(l, " 0") {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}

	fmt.Fprintln(&b)
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "check %s %s\n", mark, c.Text)
	}
	if r.OK {
		fmt.Fprintf(&b, "\nAll %d response codes shown: %s.\n", len(codesShown(r.Steps)), strings.Join(codesShown(r.Steps), " "))
	}
	_, err := io.WriteString(out, b.String())
	return err
}

// codesShown lists the response codes the steps got, in the order of the
// response code table.
func codesShown(steps []step) []string {
	var out []string
	for _, src := range generated.Sources() {
		for _, s := range steps {
			if s.Got == src.Code() {
				out = append(out, string(src.Code()))
				break
			}
		}
	}
	return out
}
