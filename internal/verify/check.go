package verify

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

// Violation is one check that failed for one GUID.
type Violation struct {
	Check  string   `json:"check"`
	GUID   string   `json:"guid"`
	Events []string `json:"events"` // the events that show it
}

// history is one schedule's record: the channels' attempts, the core's
// truth, the settled ledger, and when reprocess ran.
type history struct {
	tx        *generated.Transaction
	attempts  []Attempt
	truth     []coresim.TruthEvent
	rows      map[string]ledger.Row
	reprocess []span
	// entries is each GUID's history in the ledger (SPEC 6b); nil when it
	// was not read, and then the transitions check has nothing to hold.
	entries map[string][]ledger.Entry
	// early: GUIDs resolve settled on purpose while the core held their
	// call (the early-settle fault).
	early map[string]bool
	// timeout is the relays' --timeout: how long a relay waits for the
	// core before it answers E901.
	timeout time.Duration
	// kills: when the runner sent each relay (by index) SIGKILL.
	kills map[int][]time.Time
}

// guidHistory is the part of a history about one GUID.
type guidHistory struct {
	h        *history
	guid     string
	attempts []Attempt
	arrived  []coresim.TruthEvent
	posted   []coresim.TruthEvent
	lookups  []coresim.TruthEvent
	row      *ledger.Row
}

// check is one rule of the model (doc.go); adding a rule is one entry.
type check struct {
	name string
	run  func(g *guidHistory) []string // the events of each violation, one string per event
	// missedExempt: not held for a GUID whose early settle missed its
	// window (missedWindow), whose second posting no relay can prevent.
	missedExempt bool
	// each: every event run returns is a violation of its own.
	each bool
}

var checks = []check{
	{"posted-at-most-once", checkPostedOnce, true, false},
	{"answers-match-the-core", checkAnswers, false, false},
	{"no-e902-after-arrival", checkNotSent, false, false},
	{"e904-exactly-for-another-body", checkReused, false, false},
	{"settled-row-agrees-with-core", checkRow, true, false},
	{"no-lookup-during-post", checkLookups, false, false},
	{"history-accounts-for-every-transition", checkTransitions, false, false},
	{"unknown-left-only-on-a-404", checkUnknownSettled, false, false},
	{"relay-settles-only-old-rows", checkSettleAge, false, false},
	{"late-answer-recorded", checkLateAnswerRecorded, false, false},
	{"only-transitions-in-the-table", checkTable, false, true},
}

// missedWindow reports whether the early-settle fault missed what it is
// there for on this GUID: the late-answer rule (the relay records the
// core's late 200 over the row settled FAILED while its call was under
// way) needs a relay still waiting for that 200. On a loaded machine the
// relay can give up first: its attempt ends E901 after its whole timeout,
// before the core posts; the early lookup, later still, finds the core
// handling the POST (404) and settles the UNKNOWN row FAILED/E902, with
// nobody left to hear the 200; reprocess then rightly resends a
// FAILED/E902 row, and the core posts it again. That is the operator's
// too-short window at its worst, which no relay can prevent (doc.go), not
// a fault of the code under test: such a GUID is exempt from the two
// checks its second posting breaks, and counted apart (missedWindows).
// A GUID posted once, an attempt answered 0000 (the relay heard the 200),
// an E901 sooner than the timeout or after the posting, or an early
// lookup before the relay gave up (the relay's E901 then makes the row
// UNKNOWN again, for settling to find it posted) leaves the GUID to every
// check.
//
// The row must also have been settled FAILED on a lookup's 404 (its
// history says so): an early lookup whose change was skipped (the relay's
// E901 landed first) leaves the row UNKNOWN, and a second posting of an
// UNKNOWN row is a resend nothing excuses (the reprocess-unknown plant).
func (g *guidHistory) missedWindow() bool {
	if !g.h.early[g.guid] || len(g.posted) < 2 || g.h.timeout <= 0 {
		return false
	}
	first := g.posted[0].At
	for _, a := range g.attempts {
		if a.Code == codeOK {
			return false
		}
	}
	settled := false
	for _, e := range g.h.entries[g.guid] {
		if e.StateAfter == ledger.StateFailed && e.HTTPStatus == http.StatusNotFound &&
			(e.StateBefore == ledger.StateUnknown || e.StateBefore == ledger.StateSent) {
			settled = true
		}
	}
	if !settled {
		return false
	}
	for _, a := range g.attempts {
		if a.Code != codeUnknown || a.Answered.Sub(a.Sent) < g.h.timeout || !a.Answered.Before(first) {
			continue
		}
		for _, e := range g.lookups {
			if e.DuringPost && e.At.After(a.Answered) && e.At.Before(first) {
				return true
			}
		}
	}
	return false
}

// missedWindows counts the GUIDs whose early settle missed its window.
func (h *history) missedWindows() int {
	n := 0
	for _, g := range h.byGUID() {
		if g.missedWindow() {
			n++
		}
	}
	return n
}

func readTruth(path string) ([]coresim.TruthEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("truth log: %w", err)
	}
	defer f.Close()
	var evs []coresim.TruthEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e coresim.TruthEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("truth log %s: %w", path, err)
		}
		evs = append(evs, e)
	}
	return evs, sc.Err()
}

// byGUID splits the history per GUID (one partition each).
func (h *history) byGUID() map[string]*guidHistory {
	gs := map[string]*guidHistory{}
	get := func(g string) *guidHistory {
		if gs[g] == nil {
			gs[g] = &guidHistory{h: h, guid: g}
			if r, ok := h.rows[g]; ok {
				gs[g].row = &r
			}
		}
		return gs[g]
	}
	for _, a := range h.attempts {
		g := get(a.GUID)
		g.attempts = append(g.attempts, a)
	}
	for _, e := range h.truth {
		switch e.Ev {
		case coresim.TruthArrive:
			g := get(e.GUID)
			g.arrived = append(g.arrived, e)
		case coresim.TruthPosted:
			g := get(e.GUID)
			g.posted = append(g.posted, e)
		case coresim.TruthLookup:
			g := get(e.GUID)
			g.lookups = append(g.lookups, e)
		}
	}
	for guid := range h.rows {
		get(guid)
	}
	return gs
}

func (h *history) postedGUIDs() int {
	n := 0
	for _, g := range h.byGUID() {
		if len(g.posted) > 0 {
			n++
		}
	}
	return n
}

// check runs every rule on every GUID.
func (h *history) check() []Violation {
	var vs []Violation
	gs := h.byGUID()
	guids := make([]string, 0, len(gs))
	for g := range gs {
		guids = append(guids, g)
	}
	sort.Strings(guids)
	for _, guid := range guids {
		missed := gs[guid].missedWindow()
		for _, c := range checks {
			if missed && c.missedExempt {
				continue
			}
			ev := c.run(gs[guid])
			switch {
			case ev == nil:
			case c.each:
				for _, e := range ev {
					vs = append(vs, Violation{Check: c.name, GUID: guid, Events: []string{e}})
				}
			default:
				vs = append(vs, Violation{Check: c.name, GUID: guid, Events: ev})
			}
		}
	}
	return vs
}

func ts(t time.Time) string { return t.Format("15:04:05.000000") }

func (a Attempt) String() string {
	s := fmt.Sprintf("attempt %d relay%d sent %s answered %s code %q", a.N, a.Relay, ts(a.Sent), ts(a.Answered), a.Code)
	if a.Twin {
		s += " (twin)"
	}
	if a.Variant {
		s += " (other body)"
	}
	if a.Err != "" {
		s += " err: " + a.Err
	}
	return s
}

func truthString(e coresim.TruthEvent) string {
	s := fmt.Sprintf("core %s %s", e.Ev, ts(e.At))
	if e.Fault != "" {
		s += " fault " + string(e.Fault)
	}
	if e.Status != 0 {
		s += fmt.Sprintf(" status %d", e.Status)
	}
	if len(e.Answer) > 0 {
		s += " answer " + string(e.Answer)
	}
	return s
}

func rowString(r *ledger.Row) string {
	if r == nil {
		return "ledger: no row"
	}
	return fmt.Sprintf("ledger: %s/%s attempts %d", r.State, r.RspCode, r.Attempts)
}

func checkPostedOnce(g *guidHistory) []string {
	if len(g.posted) <= 1 {
		return nil
	}
	var ev []string
	for _, p := range g.posted {
		ev = append(ev, truthString(p))
	}
	return ev
}

// body returns the response body of a frame (after the header).
func body(frame []byte) []byte {
	if len(frame) < generated.HeaderLen {
		return nil
	}
	return frame[generated.HeaderLen:]
}

// expectedBody is the response body the relay must build from a posting.
func (g *guidHistory) expectedBody() ([]byte, error) {
	rb := g.h.tx.NewResponse()
	if err := rb.FromCoreJSON(g.posted[0].Answer); err != nil {
		return nil, err
	}
	return rb.AppendTo(nil)
}

func checkAnswers(g *guidHistory) []string {
	for _, a := range g.attempts {
		switch {
		case a.Code == codeOK:
			if len(g.posted) == 0 {
				return []string{a.String(), "core: never posted"}
			}
			want, err := g.expectedBody()
			if err != nil {
				return []string{truthString(g.posted[0]), "its answer does not build a response: " + err.Error()}
			}
			if !bytes.Equal(body(a.Answer), want) {
				return []string{a.String(), fmt.Sprintf("answered body %q", body(a.Answer)), truthString(g.posted[0]), fmt.Sprintf("expected body %q", want)}
			}
		case final(a.Code) && len(g.posted) > 0:
			// A refusal (B2xx, E500) for a GUID the core posted.
			return []string{a.String(), truthString(g.posted[0])}
		}
	}
	return nil
}

// couldSend reports whether an attempt may have sent the GUID to the core:
// anything but E903 and E904, which are answered without a call.
func couldSend(a Attempt) bool { return a.Code != codeBusy && a.Code != codeReused }

func checkNotSent(g *guidHistory) []string {
	for i, a := range g.attempts {
		if a.Code != codeNotSent {
			continue
		}
	arrivals:
		for _, e := range g.arrived {
			if e.At.Before(a.Sent) || e.At.After(a.Answered) {
				continue
			}
			for j, o := range g.attempts {
				// An attempt never answered (its connection dropped, its
				// relay killed) may reach the core after the channel
				// gave up on it: the kernel still delivers what the
				// relay had written, and a stopping relay finishes its
				// calls.
				unanswered := o.Code == ""
				if j != i && couldSend(o) && !e.At.Before(o.Sent) && (unanswered || !e.At.After(o.Answered)) {
					continue arrivals
				}
			}
			for _, r := range g.h.reprocess {
				if !e.At.Before(r.from) && !e.At.After(r.to) {
					continue arrivals
				}
			}
			return []string{a.String(), truthString(e), "no other attempt and no reprocess run was under way"}
		}
	}
	return nil
}

func checkReused(g *guidHistory) []string {
	if g.row == nil {
		for _, a := range g.attempts {
			if a.Code == codeReused {
				return []string{a.String(), rowString(nil)}
			}
		}
		return nil
	}
	stored := g.row.Request[generated.HeaderLen:]
	same := func(a Attempt) bool { return bytes.Equal(a.Request[generated.HeaderLen:], stored) }
	for _, a := range g.attempts {
		switch {
		case same(a) && a.Code == codeReused:
			return []string{a.String(), "the same body as the ledger's", rowString(g.row)}
		case same(a) || a.Code == codeReused || a.Code == "" || a.Code == codeNotSent:
			// E902 sent nothing: a relay that cannot read its ledger (a
			// database restarting) or refuses before it claims says so.
		default:
			return []string{a.String(), "a body other than the ledger's, answered " + a.Code, rowString(g.row)}
		}
	}
	if len(g.posted) > 0 {
		want, err := g.coreJSON(g.row.Request)
		if err != nil {
			return []string{rowString(g.row), "stored request does not build a core call: " + err.Error()}
		}
		for _, p := range g.posted {
			if !bytes.Equal(p.Request, want) {
				return []string{truthString(p), fmt.Sprintf("posted request %s", p.Request), fmt.Sprintf("ledger's request %s", want)}
			}
		}
	}
	return nil
}

// coreJSON is the core call the relay makes for a stored request frame.
func (g *guidHistory) coreJSON(frame []byte) ([]byte, error) {
	rb := g.h.tx.NewRequest()
	if err := rb.Decode(string(frame[generated.HeaderLen:])); err != nil {
		return nil, err
	}
	return rb.CoreJSON(g.guid)
}

func checkRow(g *guidHistory) []string {
	posted := len(g.posted) > 0
	if g.row == nil {
		if posted {
			return []string{rowString(nil), truthString(g.posted[0])}
		}
		for _, a := range g.attempts {
			if final(a.Code) || a.Code == codeUnknown {
				return []string{a.String(), rowString(nil)}
			}
		}
		return nil
	}
	r := g.row
	switch {
	case r.State != ledger.StateDone && r.State != ledger.StateFailed:
		return []string{rowString(r), "left unsettled"}
	case r.State == ledger.StateFailed && r.RspCode != codeNotSent:
		return []string{rowString(r), "FAILED with a code other than " + codeNotSent}
	case (r.State == ledger.StateDone && r.RspCode == codeOK) != posted:
		ev := []string{rowString(r)}
		if posted {
			ev = append(ev, truthString(g.posted[0]))
		} else {
			ev = append(ev, "core: never posted")
		}
		return ev
	case posted:
		want, err := g.expectedBody()
		if err != nil || !bytes.Equal(body(r.Response), want) {
			return []string{rowString(r), fmt.Sprintf("stored body %q", body(r.Response)), truthString(g.posted[0]), fmt.Sprintf("expected body %q", want)}
		}
	}
	return nil
}

// checkLookups: no lookup while the core still handles a POST of the GUID.
// The ages settling waits for (minAge, staleSent) are longer than the core
// ever takes here (params.maxDelay), so such a lookup measured them wrong.
//
// A GUID the early-settle fault settled is exempt: that lookup overtakes
// the POST on purpose, modelling an operator's too-short window, the very
// situation the late-answer rule (the relay records the core's late 200
// over FAILED) exists for; the other checks still hold its history.
//
// So is reprocess's lookup of a FAILED row (reprocessLookup): it waits for
// no age (SPEC 7), and a channel's retry may re-claim and send the row
// between the page that selected it and its lookup; the re-claim after the
// lookup is conditional on the row as selected, so that row is skipped,
// never sent (posted-at-most-once holds it).
func checkLookups(g *guidHistory) []string {
	if g.h.early[g.guid] {
		return nil
	}
	for _, e := range g.lookups {
		if e.DuringPost && !g.reprocessLookup(e) {
			ev := []string{truthString(e) + " while a POST of it was being handled"}
			for _, a := range g.arrived {
				if !a.At.After(e.At) {
					ev = append(ev, truthString(a))
				}
			}
			return ev
		}
	}
	return nil
}

// reprocessLookup reports whether lookup e may be reprocess's of the row
// FAILED/E902: a reprocess run was under way, and what last settled the
// row before e was an attempt answered E902 or a lookup answering 404
// (which settles a row FAILED/E902), not an E901 (an UNKNOWN row, which
// reprocess must never look up to resend). Only the runner's clock is
// compared (attempts, truth and reprocess runs), never the ledger's, which
// may be the database's shifted one.
func (g *guidHistory) reprocessLookup(e coresim.TruthEvent) bool {
	during := false
	for _, r := range g.h.reprocess {
		if !e.At.Before(r.from) && !e.At.After(r.to) {
			during = true
			break
		}
	}
	if !during {
		return false
	}
	var last time.Time
	failed := false
	for _, a := range g.attempts {
		if a.Code != "" && a.Answered.Before(e.At) && a.Answered.After(last) {
			last, failed = a.Answered, a.Code == codeNotSent
		}
	}
	for _, l := range g.lookups {
		if l.Status == http.StatusNotFound && l.At.Before(e.At) && l.At.After(last) {
			last, failed = l.At, true
		}
	}
	return failed
}

// checkTransitions: the ledger's history of the GUID (SPEC 6b) accounts for
// every transition of its row. Taken in time order, the entries chain from
// no row: each one's before is the previous one's after, attempts never go
// down, and the last one's after is the settled row (its state, rsp_code
// and attempts), or no row when there is none. An entry that records a
// late answer over a re-claimed row changes nothing (before and after are
// the row's state): its rsp_code is the core's answer, not the row's, so
// only its state is held to the chain.
func checkTransitions(g *guidHistory) []string {
	if g.h.entries == nil {
		return nil
	}
	type state struct {
		st       ledger.State
		rsp      string
		attempts int
	}
	var cur state // no row
	var shown []string
	for _, e := range chainOrder(g.h.entries[g.guid]) {
		shown = append(shown, entryString(e))
		if !fits(rowAt{cur.st, cur.rsp}, e) {
			return append(shown, fmt.Sprintf("expected a change from %s", stateString(cur.st, cur.rsp)))
		}
		if e.StateAfter != "" && e.Attempts < cur.attempts {
			return append(shown, fmt.Sprintf("attempts went down from %d", cur.attempts))
		}
		switch {
		case e.StateBefore == e.StateAfter:
			// a note that changed nothing
		case e.StateAfter == "":
			cur = state{} // purged: a later claim starts again
		default:
			cur = state{e.StateAfter, e.RspAfter, e.Attempts}
		}
	}
	r := g.row
	switch {
	case r == nil && cur.st != "":
		return append(shown, "the history ends in "+stateString(cur.st, cur.rsp), rowString(nil))
	case r != nil && (cur.st != r.State || cur.rsp != r.RspCode || cur.attempts != r.Attempts):
		return append(shown, fmt.Sprintf("the history ends in %s attempts %d", stateString(cur.st, cur.rsp), cur.attempts), rowString(r))
	}
	return nil
}

// chainOrder is a row's history in time order. Changes of one row may
// carry the same time (their transactions read the clock in the same
// microsecond, or one transaction of a relay's writer made both): of
// those, the one that fits the chain (fits) comes first.
func chainOrder(entries []ledger.Entry) []ledger.Entry {
	es := slices.Clone(entries)
	slices.SortStableFunc(es, func(a, b ledger.Entry) int { return a.At.Compare(b.At) })
	var cur rowAt // no row
	for i := range es {
		for j := i; j < len(es) && es[j].At.Equal(es[i].At); j++ {
			if fits(cur, es[j]) {
				es[i], es[j] = es[j], es[i]
				break
			}
		}
		switch e := es[i]; {
		case e.StateBefore == e.StateAfter:
			// a note that changed nothing
		case e.StateAfter == "":
			cur = rowAt{} // purged: a later claim starts again
		default:
			cur = rowAt{e.StateAfter, e.RspAfter}
		}
	}
	return es
}

// fits reports whether e is a change of the row cur: its before is cur (a
// note, which changes nothing, names no code before).
func fits(cur rowAt, e ledger.Entry) bool {
	return e.StateBefore == cur.State && (e.RspBefore == cur.Rsp || e.StateBefore == e.StateAfter)
}

// checkUnknownSettled: a row leaves UNKNOWN for FAILED only on the core's
// word that the GUID was never posted, a lookup it answered 404: each such
// change in the row's history (SPEC 6b) needs a 404 lookup of the GUID in
// the core's truth log. A row whose result is unknown and that was taken
// as not sent without asking (reprocess resending it, say) leaves UNKNOWN
// with no lookup behind it, whether or not the core had posted it.
func checkUnknownSettled(g *guidHistory) []string {
	if g.h.entries == nil {
		return nil
	}
	var ev []string
	changes := 0
	for _, e := range g.h.entries[g.guid] {
		if e.StateBefore == ledger.StateUnknown && e.StateAfter == ledger.StateFailed {
			changes++
			ev = append(ev, entryString(e))
		}
	}
	notFound := 0
	for _, e := range g.lookups {
		if e.Status == http.StatusNotFound {
			notFound++
			ev = append(ev, truthString(e))
		}
	}
	if changes <= notFound {
		return nil
	}
	return append(ev, fmt.Sprintf("%d changes from UNKNOWN to FAILED, %d lookups the core answered 404", changes, notFound))
}

// settleAgeSlack is what checkSettleAge allows between the database time
// the history stamps on a change and the row's updated_at of the same
// transaction (stamped at its start, before the batch's statements ran).
// Ages measured by another clock are wrong by minutes, not by this.
const settleAgeSlack = time.Second

// checkSettleAge: a relay settles a row (SPEC 5.11, 6a) only once it has
// been UNKNOWN for --settle-min-age or SENT for --stale-sent by the
// database's clock. The row's history stamps every change by that clock,
// so the age a settling change acted on is the time since the change
// before it. A settling that measured ages by another clock shows here
// as a change too soon after the previous one, whether or not a POST was
// at the core at that moment (no-lookup-during-post sees only the
// latter). Only the relays' settling is checked: the settling phase's
// resolve runs with no age on purpose, and so does the early settle.
func checkSettleAge(g *guidHistory) []string {
	if g.h.entries == nil {
		return nil
	}
	es := chainOrder(g.h.entries[g.guid])
	var prev *ledger.Entry // the last change of the row's state or code
	for i := range es {
		e := &es[i]
		settling := strings.HasPrefix(e.Reason, "lookup ") || strings.HasPrefix(e.Reason, "stale SENT, ")
		if prev != nil && e.Command == "relay" && settling {
			need := minAgeDuration
			if e.StateBefore == ledger.StateSent {
				need = staleSentDuration
			}
			if age := e.At.Sub(prev.At); age < need-settleAgeSlack {
				return []string{entryString(*prev), entryString(*e),
					fmt.Sprintf("a relay settled the row %v after its last change, by the database's clock; it waits %v", age.Round(time.Millisecond), need)}
			}
		}
		if e.StateBefore != e.StateAfter || e.RspBefore != e.RspAfter {
			prev = e
		}
	}
	return nil
}

func stateString(st ledger.State, rsp string) string {
	if st == "" {
		return "no row"
	}
	return fmt.Sprintf("%s/%s", st, rsp)
}

func entryString(e ledger.Entry) string {
	return fmt.Sprintf("history %s %s → %s attempts %d by %s: %s", ts(e.At),
		stateString(e.StateBefore, e.RspBefore), stateString(e.StateAfter, e.RspAfter), e.Attempts, e.Command, e.Reason)
}

// checkLateAnswerRecorded: a relay that answered 0000 for a call settled
// early (the early-settle fault: a lookup made its row FAILED/E902 while
// the call was under way) records that late answer over FAILED while it
// lives (SPEC 6), so nobody else takes the row from FAILED to DONE/0000.
// reprocess, which looks a FAILED row up before resending it, does that
// for a row whose relay forgot the answer (the forget-late-200 plant), and
// then neither the row nor the core's postings show the relay's mistake;
// this does. Only a relay SIGKILLed since the attempt was sent may have
// lost it. (A settling lookup that found the transfer posted before the
// relay recorded it took the row from SENT, not FAILED: nothing was
// forgotten there.)
func checkLateAnswerRecorded(g *guidHistory) []string {
	if !g.h.early[g.guid] || g.h.entries == nil {
		return nil
	}
	es := g.h.entries[g.guid]
	byOther := -1
	for i, e := range es {
		if e.StateBefore == ledger.StateFailed && e.StateAfter == ledger.StateDone && e.RspAfter == codeOK && e.Command != "relay" {
			byOther = i
		}
	}
	if byOther < 0 {
		return nil
	}
	for _, a := range g.attempts {
		if a.Code != codeOK || g.h.killedSince(a.Relay, a.Sent) {
			continue
		}
		ev := []string{a.String(), fmt.Sprintf("relay%d, not killed since, did not record its late answer: the row went from %s to %s by %s",
			a.Relay, stateString(ledger.StateFailed, codeNotSent), stateString(ledger.StateDone, codeOK), es[byOther].Command)}
		for _, e := range es {
			ev = append(ev, entryString(e))
		}
		return append(ev, rowString(g.row))
	}
	return nil
}

// killedSince reports whether relay was SIGKILLed at or after t.
func (h *history) killedSince(relay int, t time.Time) bool {
	for _, k := range h.kills[relay] {
		if !k.Before(t) {
			return true
		}
	}
	return false
}
