package verify

import (
	"os"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/coresim"
	"lhrelay/internal/ledger"
)

// change is a history entry of testGUID by actor, from before to after.
func change(ms int, actor string, before, after rowAt, attempts int, reason string) ledger.Entry {
	return ledger.Entry{GUID: testGUID, At: at(ms), Command: actor, Host: "host", PID: 42,
		StateBefore: before.State, RspBefore: before.Rsp, StateAfter: after.State, RspAfter: after.Rsp,
		Attempts: attempts, Why: ledger.Why{Reason: reason}}
}

// tableViolations are checkTable's events for a history of testGUID.
func tableViolations(es ...ledger.Entry) []string {
	return checkTable(&guidHistory{h: &history{entries: map[string][]ledger.Entry{testGUID: es}}, guid: testGUID})
}

// TestTableAllowsEveryMoveItLists: every change of every line of the table,
// made by its actor, passes the checker.
func TestTableAllowsEveryMoveItLists(t *testing.T) {
	n := 0
	for _, a := range transitionTable {
		for _, m := range a.moves {
			for _, from := range m.from {
				for _, to := range m.to {
					if m.note {
						to.State = from.State
					}
					e := change(0, a.actor, from, to, 1, m.what)
					assert.Check(t, is.Len(tableViolations(e), 0), "%s: %s", a.actor, entryString(e))
					n++
				}
			}
		}
	}
	assert.Check(t, n > 50, "only %d changes in the table", n)
}

// TestTableAllowsWhatTheSPECDescribes: whole histories as SPEC 5–7 describe
// them, by their actors, hand-built, pass entry by entry.
func TestTableAllowsWhatTheSPECDescribes(t *testing.T) {
	b201 := rowAt{ledger.StateDone, "B201"}
	for _, tc := range []struct {
		name    string
		entries []ledger.Entry
	}{
		{"claim, posted", []ledger.Entry{change(0, "relay", rowNone, rowSent, 1, "claimed"), change(10, "relay", rowSent, rowPosted, 1, "core answered HTTP 200")}},
		{"refused by the core, purged, claimed again", []ledger.Entry{change(0, "relay", rowNone, rowSent, 1, "claimed"),
			change(10, "relay", rowSent, b201, 1, "core answered HTTP 422"), change(20, "purge", b201, rowNone, 1, "purged after 1 days"),
			change(30, "relay", rowNone, rowSent, 1, "claimed")}},
		{"E902, the channel's resend", []ledger.Entry{change(0, "relay", rowNone, rowSent, 1, "claimed"),
			change(10, "relay", rowSent, rowNotSent, 1, "core not reached"), change(20, "relay", rowNotSent, rowSentAgain, 2, "re-claimed"),
			change(30, "relay", rowSentAgain, rowPosted, 2, "core answered HTTP 200")}},
		{"E901, settled by the relay", []ledger.Entry{change(0, "relay", rowNone, rowSent, 1, "claimed"),
			change(10, "relay", rowSent, rowUnknown, 1, "no answer"), change(5000, "relay", rowUnknown, rowPosted, 1, "lookup 200: posted")}},
		{"E901, resolve 404, reprocess", []ledger.Entry{change(0, "relay", rowNone, rowSent, 1, "claimed"),
			change(10, "relay", rowSent, rowUnknown, 1, "no answer"), change(20, "resolve", rowUnknown, rowNotSent, 1, "lookup 404"),
			change(30, "reprocess", rowNotSent, rowSentAgain, 2, "re-claimed to resend"), change(40, "reprocess", rowSentAgain, rowPosted, 2, "core answered HTTP 200")}},
		{"orphaned SENT settled", []ledger.Entry{change(0, "relay", rowNone, rowSent, 1, "claimed"),
			change(8000, "resolve", rowSent, rowNotSent, 1, "stale SENT, lookup 404")}},
		{"settled early, the late 200", []ledger.Entry{change(0, "relay", rowNone, rowSent, 1, "claimed"),
			change(10, "resolve", rowSent, rowNotSent, 1, "stale SENT, lookup 404"), change(20, "relay", rowNotSent, rowPosted, 1, "late answer")}},
		{"settled early, the late E901", []ledger.Entry{change(0, "relay", rowNone, rowSent, 1, "claimed"),
			change(10, "resolve", rowSent, rowNotSent, 1, "stale SENT, lookup 404"), change(20, "relay", rowNotSent, rowUnknown, 1, "late answer")}},
		{"settled early, posted already", []ledger.Entry{change(0, "relay", rowNone, rowSent, 1, "claimed"),
			change(10, "resolve", rowSent, rowNotSent, 1, "stale SENT, lookup 404"), change(20, "reprocess", rowNotSent, rowPosted, 1, "posted already")}},
		{"an unconfirmed claim", []ledger.Entry{change(0, "relay", rowNone, rowSent, 1, "claimed"),
			change(10, "relay", rowSent, rowNotSent, 1, "claim's commit not confirmed")}},
		{"a conflict noted", []ledger.Entry{change(0, "relay", rowNone, rowSent, 1, "claimed"),
			change(10, "resolve", rowSent, rowNotSent, 1, "stale SENT, lookup 404"), change(20, "relay", rowNotSent, rowSentAgain, 2, "re-claimed"),
			change(30, "relay", rowAt{ledger.StateSent, ""}, rowAt{ledger.StateSent, codeOK}, 2, "conflict")}},
		{"copied", []ledger.Entry{change(0, "ledger copy", rowNone, rowUnknown, 1, "copied from relay.db")}},
	} {
		assert.Check(t, is.Len(tableViolations(tc.entries...), 0), tc.name)
	}
}

// TestTableRefuses: a change its actor may not make is a violation, whatever
// the rest of the history; each names the entry.
func TestTableRefuses(t *testing.T) {
	sentUnknown := rowAt{ledger.StateSent, codeUnknown}
	for _, tc := range []struct {
		name string
		e    ledger.Entry
		why  string
	}{
		{"reprocess re-claims UNKNOWN (the reprocess-reclaim-unknown plant)", change(0, "reprocess", rowUnknown, sentUnknown, 2, "planted"), "not a transition reprocess may make"},
		{"reprocess records the resend of an UNKNOWN row", change(0, "reprocess", sentUnknown, rowPosted, 2, "core answered HTTP 200"), "not a transition reprocess may make"},
		{"reprocess settles an UNKNOWN row from its lookup", change(0, "reprocess", rowUnknown, rowPosted, 1, "posted already"), "not a transition reprocess may make"},
		{"reprocess takes UNKNOWN for FAILED (the reprocess-unknown plant)", change(0, "reprocess", rowUnknown, rowNotSent, 1, "planted"), "not a transition reprocess may make"},
		{"reprocess records a call it did not make", change(0, "reprocess", rowSent, rowPosted, 1, "core answered HTTP 200"), "not a transition reprocess may make"},
		{"resolve re-claims FAILED", change(0, "resolve", rowNotSent, rowSentAgain, 2, "re-claimed"), "not a transition resolve may make"},
		{"resolve settles a FAILED row", change(0, "resolve", rowNotSent, rowPosted, 1, "lookup 200"), "not a transition resolve may make"},
		{"resolve claims", change(0, "resolve", rowNone, rowSent, 1, "claimed"), "not a transition resolve may make"},
		{"resolve settles with a refusal", change(0, "resolve", rowUnknown, rowAt{ledger.StateDone, "B201"}, 1, "lookup 200"), "not a transition resolve may make"},
		{"purge of an UNKNOWN row", change(0, "purge", rowUnknown, rowNone, 1, "purged"), "not a transition purge may make"},
		{"purge of a FAILED row", change(0, "purge", rowNotSent, rowNone, 1, "purged"), "not a transition purge may make"},
		{"purge of a SENT row", change(0, "purge", rowSent, rowNone, 1, "purged"), "not a transition purge may make"},
		{"purge changes a row", change(0, "purge", rowPosted, rowNotSent, 1, "purged"), "not a transition purge may make"},
		{"the relay claims a row DONE", change(0, "relay", rowNone, rowPosted, 1, "claimed"), "not a transition relay may make"},
		{"the relay re-claims UNKNOWN", change(0, "relay", rowUnknown, sentUnknown, 2, "re-claimed"), "not a transition relay may make"},
		{"the relay undoes DONE", change(0, "relay", rowPosted, rowNotSent, 1, "core not reached"), "not a transition relay may make"},
		{"the relay settles FAILED as posted from a refusal", change(0, "relay", rowUnknown, rowAt{ledger.StateDone, "B202"}, 1, "lookup 200"), "not a transition relay may make"},
		{"a late E902 over FAILED", change(0, "relay", rowNotSent, rowNotSent, 1, "late answer"), "not a transition relay may make"},
		{"a note that names the row's code before", change(0, "relay", rowUnknown, rowAt{ledger.StateUnknown, codeOK}, 1, "conflict"), "not a transition relay may make"},
		{"a note that changes the state", change(0, "relay", rowAt{ledger.StateSent, ""}, rowAt{ledger.StateUnknown, codeOK}, 1, "conflict"), "not a transition relay may make"},
		{"a copy over a row", change(0, "ledger copy", rowPosted, rowPosted, 1, "copied"), "not a transition ledger copy may make"},
		{"an actor the table does not name", change(0, "sandbox", rowNone, rowSent, 1, "claimed"), `the transition table names no actor "sandbox"`},
		{"no actor", change(0, "", rowNone, rowSent, 1, "claimed"), `the transition table names no actor ""`},
	} {
		ev := tableViolations(change(-10, "relay", rowNone, rowSent, 1, "claimed"), tc.e)
		if !assert.Check(t, is.Len(ev, 1), tc.name) {
			continue
		}
		assert.Check(t, is.Contains(ev[0], tc.why), tc.name)
		assert.Check(t, is.Contains(ev[0], entryString(tc.e)), tc.name)
	}
}

// TestTableViolationsOneEach: verify's check reports each entry the table
// refuses as a violation of its own, naming the GUID, the time, the actor,
// before → after and the reason; the history of the reprocess-reclaim-unknown
// plant (an UNKNOWN row re-claimed after a lookup 404 and posted once) breaks
// no other check.
func TestTableViolationsOneEach(t *testing.T) {
	f := newFixture(t)
	sentUnknown := rowAt{ledger.StateSent, codeUnknown}
	rows := f.row(ledger.StateDone, codeOK, f.orig, f.answer)
	r := rows[testGUID]
	r.Attempts = 2
	rows[testGUID] = r
	// The relay's call never reached the core; reprocess's lookup found
	// nothing, and its resend was posted once.
	posting := f.posting
	posting.At = at(3050)
	truth := []coresim.TruthEvent{{At: at(2990), Ev: coresim.TruthLookup, GUID: testGUID, Status: 404},
		{At: at(3040), Ev: coresim.TruthArrive, GUID: testGUID}, posting}
	h := history{tx: f.tx, attempts: []Attempt{f.attempt(codeUnknown, 0, 1000, f.orig)},
		truth: truth, rows: rows, reprocess: []span{{at(2980), at(3200)}},
		entries: map[string][]ledger.Entry{testGUID: {
			change(10, "relay", rowNone, rowSent, 1, "claimed: new GUID"),
			change(1000, "relay", rowSent, rowUnknown, 1, "no answer from the core"),
			change(3000, "reprocess", rowUnknown, sentUnknown, 2, "planted: an UNKNOWN row re-claimed to resend (attempts below 32)"),
			change(3100, "reprocess", sentUnknown, rowPosted, 2, "core answered HTTP 200"),
		}}}
	vs := h.check()
	assert.Assert(t, is.Len(vs, 2), "%+v", vs)
	for _, v := range vs {
		assert.Check(t, is.Equal(v.Check, "only-transitions-in-the-table"))
		assert.Check(t, is.Equal(v.GUID, testGUID))
		assert.Check(t, is.Len(v.Events, 1))
	}
	ev := vs[0].Events[0]
	for _, want := range []string{"GUID " + testGUID, ts(at(3000)), "UNKNOWN/E901 → SENT/E901", "by reprocess", "planted: an UNKNOWN row re-claimed", "pid 42 on host", "not a transition reprocess may make"} {
		assert.Check(t, is.Contains(ev, want))
	}
	assert.Check(t, is.Contains(vs[1].Events[0], "SENT/E901 → DONE/0000"))
}

// TestTransitionTableInREADME: the README's "What is proven" shows the table
// the checker holds every history entry to.
func TestTransitionTableInREADME(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	assert.NilError(t, err)
	readme := string(b)
	_, proven, ok := strings.Cut(readme, "## What is proven, and how to re-run it")
	assert.Assert(t, ok, "README has no section What is proven")
	proven, _, _ = strings.Cut(proven, "\n## ")
	assert.Check(t, strings.Contains(proven, tableMarkdown()), "the README's table is not the checker's, which is:\n%s", tableMarkdown())
}
