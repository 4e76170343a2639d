package verify

import (
	"fmt"
	"slices"
	"strings"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

// rowAt is a row as one side of a history entry shows it: its state and
// rsp_code. State "" is no row: before a claim or a copy, after a purge.
type rowAt struct {
	State ledger.State
	Rsp   string
}

func (r rowAt) String() string {
	if r.State == "" {
		return "no row"
	}
	return string(r.State) + "/" + r.Rsp
}

// move is one line of the transition table: a change an actor may make,
// from any row of from to any row of to, with what it is and the SPEC
// section that allows it.
type move struct {
	what string
	spec string
	from []rowAt
	to   []rowAt
	// note: an entry that changes nothing (a report): its row stays in
	// its state, which it names before and after (from's states), with no
	// code before and, after, the code it reports (to's codes; to's
	// states are not used).
	note bool
}

// allows reports whether e's before and after are a change m allows.
func (m move) allows(e ledger.Entry) bool {
	before, after := rowAt{e.StateBefore, e.RspBefore}, rowAt{e.StateAfter, e.RspAfter}
	if m.note {
		return e.StateBefore == e.StateAfter && slices.Contains(m.from, before) &&
			slices.ContainsFunc(m.to, func(r rowAt) bool { return r.Rsp == e.RspAfter })
	}
	return slices.Contains(m.from, before) && slices.Contains(m.to, after)
}

// actorMoves are the changes one actor (the history's command) may make.
type actorMoves struct {
	actor string
	moves []move
}

// The rows of the SPEC, as a history entry shows them.
var (
	rowNone = rowAt{}
	// A claim's row has no code yet; a FAILED/E902 row re-claimed keeps
	// its code while SENT.
	rowSent      = rowAt{ledger.StateSent, ""}
	rowSentAgain = rowAt{ledger.StateSent, codeNotSent}
	rowPosted    = rowAt{ledger.StateDone, codeOK}
	rowUnknown   = rowAt{ledger.StateUnknown, codeUnknown}
	rowNotSent   = rowAt{ledger.StateFailed, codeNotSent}
	// rowsRecorded: the rows an outcome makes, each code with the state SPEC
	// 4 gives it (the generated response-code table); rowsDone: the DONE ones.
	rowsRecorded, rowsDone = outcomeRows()
	// rowsLive: every row that exists between changes.
	rowsLive = append([]rowAt{rowSent, rowSentAgain}, rowsRecorded...)
	// rowsSettled: what settling (resolve's rules) makes of a row.
	rowsSettled = []rowAt{rowPosted, rowNotSent}
	// rowsNoted: the states a row may be in when a report about it is noted
	// (no code before: the note does not say the row's).
	rowsNoted = []rowAt{{ledger.StateSent, ""}, {ledger.StateDone, ""}, {ledger.StateUnknown, ""}, {ledger.StateFailed, ""}}
)

// outcomeRows are the rows an outcome records (SPEC 4), in the table's
// order, and the DONE ones among them.
func outcomeRows() (rows, done []rowAt) {
	for _, src := range generated.Sources() {
		st := ledger.State(src.LedgerState())
		if st == "" {
			continue
		}
		r := rowAt{st, string(src.Code())}
		rows = append(rows, r)
		if st == ledger.StateDone {
			done = append(done, r)
		}
	}
	return rows, done
}

// The moves more than one actor makes.
var (
	// A call's outcome, recorded by whoever made the call: the relay,
	// or reprocess for its resend ("exactly as the relay does").
	outcomeOf = func(spec string, sent ...rowAt) move {
		return move{what: "the call's outcome", spec: spec, from: sent, to: rowsRecorded}
	}
	// A call whose row was settled FAILED/E902 while it was under way
	// (a lookup that came too early), not re-claimed since: its outcome
	// is recorded over FAILED. E901 (no answer in time) is taken as the
	// call's outcome too, as 5.5 maps it: it makes the row UNKNOWN, never
	// sent again, where FAILED would let it be resent.
	lateAnswer = move{what: "late answer over FAILED", spec: "6", from: []rowAt{rowNotSent}, to: append(slices.Clone(rowsDone), rowUnknown)}
	// An outcome that found its row re-claimed since: the row is left
	// alone, and the conflict is noted in its history (and logged).
	conflict = move{what: "conflict noted, row unchanged", spec: "6", note: true, from: rowsNoted, to: rowsRecorded}
	// Settling an UNKNOWN or orphaned SENT row by its lookup (or, for a
	// read, as never posted).
	settleUnknown = move{what: "settle UNKNOWN", spec: "7", from: []rowAt{rowUnknown}, to: rowsSettled}
	settleSent    = move{what: "settle stale SENT", spec: "7", from: []rowAt{rowSent, rowSentAgain}, to: rowsSettled}
)

// transitionTable is every change a history entry may record, by actor
// (the entry's command): SPEC 5–7, 6b. Any other entry is a violation
// (checkTable). It is derived from the SPEC, not from what the code does;
// the README's "What is proven" shows it (TestTransitionTableInREADME).
var transitionTable = []actorMoves{
	{"relay", []move{
		{what: "claim", spec: "6", from: []rowAt{rowNone}, to: []rowAt{rowSent}},
		{what: "re-claim for the channel's resend", spec: "6", from: []rowAt{rowNotSent}, to: []rowAt{rowSentAgain}},
		outcomeOf("5.5, 6", rowSent, rowSentAgain),
		// An unconfirmed commit of a claim (or re-claim) found landed.
		{what: "unconfirmed claim made FAILED", spec: "6, 6a", from: []rowAt{rowSent, rowSentAgain}, to: []rowAt{rowNotSent}},
		lateAnswer,
		conflict,
		// The relay's own settling: resolve's rules (5.11).
		{what: settleUnknown.what, spec: "5.11, 7", from: settleUnknown.from, to: settleUnknown.to},
		{what: settleSent.what, spec: "5.11, 7", from: settleSent.from, to: settleSent.to},
	}},
	{"resolve", []move{settleUnknown, settleSent}},
	{"reprocess", []move{
		{what: "lookup 200: posted already, not sent", spec: "7", from: []rowAt{rowNotSent}, to: []rowAt{rowPosted}},
		{what: "re-claim to resend", spec: "7", from: []rowAt{rowNotSent}, to: []rowAt{rowSentAgain}},
		outcomeOf("6, 7", rowSentAgain),
		lateAnswer,
		conflict,
	}},
	{"purge", []move{
		{what: "delete", spec: "7", from: rowsDone, to: []rowAt{rowNone}},
	}},
	// Not in the SPEC: moving a ledger to another store (ledger copy)
	// inserts each row as it was.
	{"ledger copy", []move{
		{what: "copy", spec: "–", from: []rowAt{rowNone}, to: rowsLive},
	}},
}

// movesOf is actor's line of the table; ok is false for an actor the table
// does not name.
func movesOf(actor string) (moves []move, ok bool) {
	for _, a := range transitionTable {
		if a.actor == actor {
			return a.moves, true
		}
	}
	return nil, false
}

// disallowed says why e is not a change its actor may make, or "" when it
// is one.
func disallowed(e ledger.Entry) string {
	moves, ok := movesOf(e.Command)
	if !ok {
		return fmt.Sprintf("the transition table names no actor %q", e.Command)
	}
	for _, m := range moves {
		if m.allows(e) {
			return ""
		}
	}
	return fmt.Sprintf("not a transition %s may make", e.Command)
}

// checkTable: every entry of the row's history (SPEC 6b) is a change its
// actor may make (transitionTable). Each other entry is a violation of its
// own, with the entry.
func checkTable(g *guidHistory) []string {
	var ev []string
	for _, e := range g.h.entries[g.guid] {
		if why := disallowed(e); why != "" {
			ev = append(ev, fmt.Sprintf("GUID %s %s (pid %d on %s): %s", g.guid, entryString(e), e.PID, e.Host, why))
		}
	}
	return ev
}

// tableMarkdown is the transition table as the README shows it.
func tableMarkdown() string {
	var b strings.Builder
	b.WriteString("| actor | may make | what | SPEC |\n|---|---|---|---|\n")
	for _, a := range transitionTable {
		for _, m := range a.moves {
			var change string
			if m.note {
				var states, codes []string
				for _, r := range m.from {
					states = append(states, string(r.State))
				}
				for _, r := range m.to {
					codes = append(codes, r.Rsp)
				}
				change = fmt.Sprintf("`S/` → `S/C`: S one of %s; C one of %s", strings.Join(states, ", "), strings.Join(codes, ", "))
			} else {
				change = rowsMarkdown(m.from) + " → " + rowsMarkdown(m.to)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", a.actor, change, m.what, m.spec)
		}
	}
	return b.String()
}

// rowsMarkdown writes rows compactly: the codes of one state together
// (DONE/0000\|B201), in the order given; no row, and a row with no code
// (SENT/), on their own.
func rowsMarkdown(rows []rowAt) string {
	var parts []string
	seen := map[ledger.State]int{}
	for _, r := range rows {
		switch {
		case r.State == "":
			parts = append(parts, r.String())
			continue
		case r.Rsp == "":
			parts = append(parts, "`"+r.String())
			continue
		}
		if i, ok := seen[r.State]; ok {
			parts[i] += `\|` + r.Rsp
			continue
		}
		seen[r.State] = len(parts)
		parts = append(parts, "`"+r.String())
	}
	for i, p := range parts {
		if strings.HasPrefix(p, "`") {
			parts[i] = p + "`"
		}
	}
	return strings.Join(parts, ", ")
}
