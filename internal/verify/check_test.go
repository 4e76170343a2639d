package verify

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

const testGUID = "0123456789abcdef0123456789abcdef"

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// fixture is a one-GUID history the cases below change.
type fixture struct {
	tx            *generated.Transaction
	orig, variant []byte // request frames
	posting       coresim.TruthEvent
	answer        []byte // the 0000 answer frame built from posting
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	tx, err := postingTx()
	assert.NilError(t, err)
	f := fixture{tx: tx}
	f.orig, f.variant, err = frames(tx, Business{GUID: testGUID, Amount: 10, Memo: "m"})
	assert.NilError(t, err)
	g := &guidHistory{h: &history{tx: tx}, guid: testGUID}
	coreJSON, err := g.coreJSON(f.orig)
	assert.NilError(t, err)
	f.posting = coresim.TruthEvent{At: at(50), Ev: coresim.TruthPosted, GUID: testGUID, Request: coreJSON,
		Answer: []byte(`{"guid":"` + testGUID + `","txId":"T000000000000001","balance":90,"postedAt":"20261201120000"}`)}
	g.posted = []coresim.TruthEvent{f.posting}
	b, err := g.expectedBody()
	assert.NilError(t, err)
	f.answer = append(bytes.Repeat([]byte(" "), generated.HeaderLen), b...)
	return f
}

func (f fixture) attempt(code string, from, to int, frame []byte) Attempt {
	a := Attempt{GUID: testGUID, N: 1, Sent: at(from), Answered: at(to), Code: code, Request: frame}
	if code == codeOK {
		a.Answer = f.answer
	}
	return a
}

func (f fixture) row(state ledger.State, code string, frame, response []byte) map[string]ledger.Row {
	return map[string]ledger.Row{testGUID: {GUID: testGUID, State: state, RspCode: code, Request: frame, Response: response, Attempts: 1}}
}

// TestChecks: each rule of the model rejects a history that breaks it and
// accepts the same history without the fault.
func TestChecks(t *testing.T) {
	f := newFixture(t)
	arrive := coresim.TruthEvent{At: at(40), Ev: coresim.TruthArrive, GUID: testGUID}
	doneOK := f.row(ledger.StateDone, codeOK, f.orig, f.answer)
	otherAnswer := append(bytes.Clone(f.answer[:len(f.answer)-1]), '9')
	for _, tc := range []struct {
		name  string
		h     history
		check string // the check that must fail; "" none
	}{
		{name: "clean posting", h: history{
			attempts: []Attempt{f.attempt(codeOK, 0, 100, f.orig), f.attempt(codeOK, 200, 210, f.orig)},
			truth:    []coresim.TruthEvent{arrive, f.posting}, rows: doneOK}},
		{name: "posted twice", check: "posted-at-most-once", h: history{
			attempts: []Attempt{f.attempt(codeOK, 0, 100, f.orig)},
			truth:    []coresim.TruthEvent{arrive, f.posting, arrive, f.posting}, rows: doneOK}},
		{name: "0000 never posted", check: "answers-match-the-core", h: history{
			attempts: []Attempt{f.attempt(codeOK, 0, 100, f.orig)},
			rows:     doneOK}},
		{name: "0000 with another body", check: "answers-match-the-core", h: history{
			attempts: []Attempt{{GUID: testGUID, Sent: at(0), Answered: at(100), Code: codeOK, Request: f.orig, Answer: otherAnswer}},
			truth:    []coresim.TruthEvent{arrive, f.posting}, rows: doneOK}},
		{name: "refusal for a posted GUID", check: "answers-match-the-core", h: history{
			attempts: []Attempt{f.attempt(codeCoreFail, 0, 100, f.orig)},
			truth:    []coresim.TruthEvent{arrive, f.posting}, rows: doneOK}},
		{name: "E902 after the request arrived", check: "no-e902-after-arrival", h: history{
			attempts: []Attempt{f.attempt(codeNotSent, 0, 100, f.orig)},
			truth:    []coresim.TruthEvent{arrive}, rows: f.row(ledger.StateFailed, codeNotSent, f.orig, nil)}},
		{name: "E902 while another attempt was in flight", h: history{
			attempts: []Attempt{f.attempt(codeNotSent, 0, 100, f.orig), f.attempt(codeUnknown, 30, 1030, f.orig)},
			truth:    []coresim.TruthEvent{arrive}, rows: f.row(ledger.StateFailed, codeNotSent, f.orig, nil)}},
		{name: "E902 after an attempt never answered", h: history{
			attempts: []Attempt{{GUID: testGUID, Sent: at(0), Answered: at(20), Err: "connection closed before an answer", Request: f.orig},
				f.attempt(codeNotSent, 30, 100, f.orig)},
			truth: []coresim.TruthEvent{arrive}, rows: f.row(ledger.StateFailed, codeNotSent, f.orig, nil)}},
		{name: "E902 while reprocess ran", h: history{
			attempts:  []Attempt{f.attempt(codeNotSent, 0, 100, f.orig)},
			reprocess: []span{{at(35), at(45)}},
			truth:     []coresim.TruthEvent{arrive}, rows: f.row(ledger.StateFailed, codeNotSent, f.orig, nil)}},
		{name: "E904 for the same body", check: "e904-exactly-for-another-body", h: history{
			attempts: []Attempt{f.attempt(codeOK, 0, 100, f.orig), f.attempt(codeReused, 200, 210, f.orig)},
			truth:    []coresim.TruthEvent{arrive, f.posting}, rows: doneOK}},
		{name: "another body served", check: "e904-exactly-for-another-body", h: history{
			attempts: []Attempt{f.attempt(codeOK, 0, 100, f.orig), f.attempt(codeBusy, 200, 210, f.variant)},
			truth:    []coresim.TruthEvent{arrive, f.posting}, rows: doneOK}},
		{name: "another body E902: nothing sent", h: history{
			attempts: []Attempt{f.attempt(codeNotSent, 0, 10, f.variant), f.attempt(codeOK, 20, 100, f.orig)},
			truth:    []coresim.TruthEvent{arrive, f.posting}, rows: doneOK}},
		{name: "another body refused", h: history{
			attempts: []Attempt{f.attempt(codeOK, 0, 100, f.orig), f.attempt(codeReused, 200, 210, f.variant)},
			truth:    []coresim.TruthEvent{arrive, f.posting}, rows: doneOK}},
		{name: "row left UNKNOWN", check: "settled-row-agrees-with-core", h: history{
			attempts: []Attempt{f.attempt(codeUnknown, 0, 1000, f.orig)},
			truth:    []coresim.TruthEvent{arrive, f.posting}, rows: f.row(ledger.StateUnknown, codeUnknown, f.orig, nil)}},
		{name: "row FAILED but posted", check: "settled-row-agrees-with-core", h: history{
			attempts: []Attempt{f.attempt(codeUnknown, 0, 1000, f.orig)},
			truth:    []coresim.TruthEvent{arrive, f.posting}, rows: f.row(ledger.StateFailed, codeNotSent, f.orig, nil)}},
		{name: "row DONE/0000 but never posted", check: "settled-row-agrees-with-core", h: history{
			attempts: []Attempt{f.attempt(codeUnknown, 0, 1000, f.orig)},
			rows:     doneOK}},
		{name: "row settled not posted", h: history{
			attempts: []Attempt{f.attempt(codeUnknown, 0, 1000, f.orig)},
			truth:    []coresim.TruthEvent{arrive}, rows: f.row(ledger.StateFailed, codeNotSent, f.orig, nil)}},
		{name: "lookup while the core posts", check: "no-lookup-during-post", h: history{
			attempts: []Attempt{f.attempt(codeUnknown, 0, 1000, f.orig)},
			truth:    []coresim.TruthEvent{arrive, {At: at(45), Ev: coresim.TruthLookup, GUID: testGUID, Status: 404, DuringPost: true}, f.posting},
			rows:     doneOK}},
		{name: "reprocess's lookup of a FAILED row a retry re-claimed", h: history{
			attempts:  []Attempt{f.attempt(codeNotSent, 0, 10, f.orig), f.attempt(codeOK, 30, 100, f.orig)},
			reprocess: []span{{at(20), at(60)}},
			truth:     []coresim.TruthEvent{arrive, {At: at(45), Ev: coresim.TruthLookup, GUID: testGUID, Status: 404, DuringPost: true}, f.posting},
			rows:      doneOK}},
		{name: "lookup of a FAILED row while no reprocess ran", check: "no-lookup-during-post", h: history{
			attempts:  []Attempt{f.attempt(codeNotSent, 0, 10, f.orig), f.attempt(codeOK, 30, 100, f.orig)},
			reprocess: []span{{at(50), at(60)}},
			truth:     []coresim.TruthEvent{arrive, {At: at(45), Ev: coresim.TruthLookup, GUID: testGUID, Status: 404, DuringPost: true}, f.posting},
			rows:      doneOK}},
		{name: "lookup during reprocess of a row UNKNOWN since", check: "no-lookup-during-post", h: history{
			attempts:  []Attempt{f.attempt(codeNotSent, 0, 10, f.orig), f.attempt(codeUnknown, 15, 40, f.orig)},
			reprocess: []span{{at(20), at(60)}},
			truth:     []coresim.TruthEvent{arrive, {At: at(45), Ev: coresim.TruthLookup, GUID: testGUID, Status: 404, DuringPost: true}, f.posting},
			rows:      doneOK}},
		{name: "lookup during reprocess of a row never FAILED", check: "no-lookup-during-post", h: history{
			attempts:  []Attempt{f.attempt(codeUnknown, 0, 1000, f.orig)},
			reprocess: []span{{at(20), at(60)}},
			truth:     []coresim.TruthEvent{arrive, {At: at(45), Ev: coresim.TruthLookup, GUID: testGUID, Status: 404, DuringPost: true}, f.posting},
			rows:      doneOK}},
		{name: "no row, never sent", h: history{
			attempts: []Attempt{{GUID: testGUID, Sent: at(0), Answered: at(10), Err: "cannot reach relay", Request: f.orig}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.h.tx = f.tx
			vs := tc.h.check()
			if tc.check == "" {
				assert.Check(t, is.Len(vs, 0), "%+v", vs)
				return
			}
			var names []string
			for _, v := range vs {
				names = append(names, v.Check)
				assert.Check(t, len(v.Events) > 0)
				assert.Check(t, is.Equal(v.GUID, testGUID))
			}
			assert.Check(t, is.Contains(names, tc.check), "%+v", vs)
		})
	}
}

// TestScheduleSeeded: the same seed and index draw the same schedule;
// another index draws another.
func TestScheduleSeeded(t *testing.T) {
	a := newSchedule(42, 3, StorePostgres, 2, 2*time.Second, defaultParams)
	b := newSchedule(42, 3, StorePostgres, 2, 2*time.Second, defaultParams)
	c := newSchedule(42, 4, StorePostgres, 2, 2*time.Second, defaultParams)
	assert.DeepEqual(t, a, b)
	assert.Check(t, a.Txs[0].GUID != c.Txs[0].GUID)
	assert.Check(t, len(a.Events) > 0)
	known := map[string]bool{}
	for _, k := range faultKinds {
		known[k.name] = true
	}
	for _, e := range a.Events {
		assert.Check(t, known[e.Kind], e.Kind)
	}
	// The unknown tail's GUIDs are its own: a GUID of the traffic sent
	// again after it would be a retry, not a fresh UNKNOWN row.
	seen := map[string]bool{}
	for _, b := range a.Txs {
		seen[b.GUID] = true
	}
	assert.Equal(t, len(a.Tail), tailTries)
	for _, b := range a.Tail {
		assert.Check(t, !seen[b.GUID], "tail GUID %s drawn twice", b.GUID)
		seen[b.GUID] = true
		assert.Check(t, b.MaxAttempts == 1 && !b.Twice && b.VariantAt == 0 && !b.Replay && !b.EarlySettle)
	}
}

// TestPlantSchedulesSettleMoreEarly: a forget-late-200 plant run settles
// every schedule early, with more of its transactions settled early than
// a clean early-settle schedule has; the rest of the transactions are the
// same ones.
func TestPlantSchedulesSettleMoreEarly(t *testing.T) {
	plantRun := defaultParams
	plantRun.earlyAll = true
	early := func(s Schedule) int {
		n := 0
		for _, b := range s.Txs {
			if b.EarlySettle {
				n++
			}
		}
		return n
	}
	var clean, planted int
	for i := range 20 {
		c := newSchedule(1, i, StoreSQLite, 2, 2*time.Second, defaultParams)
		p := newSchedule(1, i, StoreSQLite, 2, 2*time.Second, plantRun)
		assert.Check(t, p.EarlySettle, "schedule %d", i)
		assert.Equal(t, len(p.Txs), len(c.Txs))
		assert.Equal(t, p.Txs[0].GUID, c.Txs[0].GUID)
		if c.EarlySettle {
			clean += early(c)
		}
		planted += early(p)
	}
	assert.Check(t, planted > 4*clean, "early-settled transactions: %d in plant runs, %d in clean ones", planted, clean)
}

// TestSQLiteDrawsNoPostgresFault: a fault that needs PostgreSQL is never
// drawn for a SQLite schedule.
func TestSQLiteDrawsNoPostgresFault(t *testing.T) {
	pgOnly := map[string]bool{}
	for _, k := range faultKinds {
		pgOnly[k.name] = k.postgres
	}
	for i := range 50 {
		for _, e := range newSchedule(1, i, StoreSQLite, 1, time.Second, defaultParams).Events {
			assert.Check(t, !pgOnly[e.Kind], "schedule %d drew %s", i, e.Kind)
		}
	}
}

// TestScheduleFaultsDatabase: the runner accepts a relay's stop cut short
// only on a schedule that makes the database unavailable; a SQLite
// schedule never does, and some PostgreSQL ones (every failover) do.
func TestScheduleFaultsDatabase(t *testing.T) {
	faulted := 0
	for i := range 50 {
		assert.Check(t, !newSchedule(1, i, StoreSQLite, 1, time.Second, defaultParams).faultsDatabase(), "sqlite schedule %d", i)
		s := newSchedule(1, i, StorePostgres, 1, time.Second, defaultParams)
		if s.Failover {
			assert.Check(t, s.faultsDatabase(), "failover schedule %d", i)
		}
		if s.faultsDatabase() {
			faulted++
		}
	}
	assert.Check(t, faulted > 0 && faulted < 50, "%d of 50 PostgreSQL schedules fault the database", faulted)
}

// TestTransitions: the ledger's history must chain from no row to the
// settled row, entry by entry.
func TestTransitions(t *testing.T) {
	f := newFixture(t)
	arrive := coresim.TruthEvent{At: at(40), Ev: coresim.TruthArrive, GUID: testGUID}
	entry := func(ms int, by, from, fromRsp, to, toRsp string, attempts int) ledger.Entry {
		return ledger.Entry{GUID: testGUID, At: at(ms), Command: by, StateBefore: ledger.State(from), RspBefore: fromRsp,
			StateAfter: ledger.State(to), RspAfter: toRsp, Attempts: attempts}
	}
	claim := entry(10, "relay", "", "", "SENT", "", 1)
	unknown := entry(1000, "relay", "SENT", "", "UNKNOWN", codeUnknown, 1)
	resolved := entry(5000, "resolve", "UNKNOWN", codeUnknown, "DONE", codeOK, 1)
	for _, tc := range []struct {
		name    string
		entries []ledger.Entry
		row     map[string]ledger.Row
		fails   bool
	}{
		{name: "every transition", entries: []ledger.Entry{claim, unknown, resolved}},
		{name: "a transition missing", fails: true, entries: []ledger.Entry{claim, resolved}},
		{name: "no claim", fails: true, entries: []ledger.Entry{unknown, resolved}},
		{name: "ends elsewhere than the row", fails: true, entries: []ledger.Entry{claim, unknown}},
		{name: "attempts differ from the row's", fails: true,
			entries: []ledger.Entry{claim, unknown, entry(5000, "resolve", "UNKNOWN", codeUnknown, "DONE", codeOK, 2)}},
		{name: "same time, chain order", entries: []ledger.Entry{claim, entry(1000, "resolve", "UNKNOWN", codeUnknown, "DONE", codeOK, 1), unknown}},
		{name: "a note that changes nothing", entries: []ledger.Entry{claim, unknown,
			entry(2000, "relay", "UNKNOWN", "", "UNKNOWN", codeOK, 1), resolved}},
		{name: "no history for a row", fails: true, entries: nil},
		{name: "no row, no history", row: map[string]ledger.Row{}, entries: nil},
		{name: "history for no row", fails: true, row: map[string]ledger.Row{}, entries: []ledger.Entry{claim}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := tc.row
			if rows == nil {
				rows = f.row(ledger.StateDone, codeOK, f.orig, f.answer)
			}
			h := history{tx: f.tx, attempts: []Attempt{f.attempt(codeOK, 0, 100, f.orig)},
				truth: []coresim.TruthEvent{arrive, f.posting}, rows: rows,
				entries: map[string][]ledger.Entry{testGUID: tc.entries}}
			if len(rows) == 0 {
				h.attempts[0] = Attempt{GUID: testGUID, Sent: at(0), Answered: at(10), Err: "cannot reach relay", Request: f.orig}
				h.truth = nil
			}
			assertFails(t, h, tc.fails, "history-accounts-for-every-transition")
		})
	}
}

// TestMissedWindow: an early-settled GUID whose relay gave up (E901 after
// its whole timeout) before the core posted it, and whose row the early
// lookup made FAILED, is posted again by reprocess: no relay can prevent
// that, so the two checks it breaks are not held and it is counted apart.
// The same postings with a relay that heard the 200 (the forget-late-200
// plant), or gave up sooner than its timeout or after the early lookup,
// or a GUID not settled early, are violations.
func TestMissedWindow(t *testing.T) {
	f := newFixture(t)
	arrive := coresim.TruthEvent{At: at(40), Ev: coresim.TruthArrive, GUID: testGUID}
	earlyLookup := coresim.TruthEvent{At: at(1020), Ev: coresim.TruthLookup, GUID: testGUID, Status: 404, DuringPost: true}
	first := f.posting
	first.At = at(1050)
	again := f.posting
	again.At = at(3000)
	truth := []coresim.TruthEvent{arrive, earlyLookup, first, {At: at(2990), Ev: coresim.TruthArrive, GUID: testGUID}, again}
	doneOK := f.row(ledger.StateDone, codeOK, f.orig, f.answer)
	r := doneOK[testGUID]
	r.Attempts = 2 // the resend's
	doneOK[testGUID] = r
	early := map[string]bool{testGUID: true}
	entry := func(ms int, by, from, fromRsp, to, toRsp string, attempts, status int) ledger.Entry {
		return ledger.Entry{GUID: testGUID, At: at(ms), Command: by, StateBefore: ledger.State(from), RspBefore: fromRsp,
			StateAfter: ledger.State(to), RspAfter: toRsp, Attempts: attempts, Why: ledger.Why{HTTPStatus: status}}
	}
	// Claimed, E901, settled FAILED on the early lookup's 404, resent and
	// posted again.
	entries := []ledger.Entry{entry(10, "relay", "", "", "SENT", "", 1, 0), entry(1005, "relay", "SENT", "", "UNKNOWN", codeUnknown, 1, 0),
		entry(1025, "resolve", "UNKNOWN", codeUnknown, "FAILED", codeNotSent, 1, 404),
		entry(2980, "reprocess", "FAILED", codeNotSent, "SENT", codeNotSent, 2, 0), entry(3010, "reprocess", "SENT", codeNotSent, "DONE", codeOK, 2, 200)}
	for _, tc := range []struct {
		name     string
		attempt  Attempt
		early    map[string]bool
		noSettle bool // the early lookup's change was skipped: the row stayed UNKNOWN
		missed   bool
	}{
		{name: "relay gave up before the posting", attempt: f.attempt(codeUnknown, 0, 1010, f.orig), early: early, missed: true},
		{name: "relay heard the 200", attempt: f.attempt(codeOK, 0, 1060, f.orig), early: early},
		{name: "E901 sooner than the timeout", attempt: f.attempt(codeUnknown, 0, 600, f.orig), early: early},
		{name: "E901 after the posting", attempt: f.attempt(codeUnknown, 0, 1100, f.orig), early: early},
		{name: "early lookup before the relay gave up", attempt: f.attempt(codeUnknown, 30, 1030, f.orig), early: early},
		{name: "not settled early", attempt: f.attempt(codeUnknown, 0, 1010, f.orig)},
		{name: "the early lookup changed nothing", attempt: f.attempt(codeUnknown, 0, 1010, f.orig), early: early, noSettle: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := history{tx: f.tx, attempts: []Attempt{tc.attempt}, truth: truth, rows: doneOK, early: tc.early, timeout: time.Second,
				entries: map[string][]ledger.Entry{testGUID: entries}}
			if tc.noSettle {
				h.entries = map[string][]ledger.Entry{testGUID: append(slices.Clone(entries[:2]), entries[3:]...)}
			}
			vs := h.check()
			if tc.missed {
				assert.Check(t, is.Len(vs, 0), "%+v", vs)
				assert.Check(t, is.Equal(h.missedWindows(), 1))
				return
			}
			var names []string
			for _, v := range vs {
				names = append(names, v.Check)
			}
			assert.Check(t, is.Contains(names, "posted-at-most-once"), "%+v", vs)
			assert.Check(t, is.Equal(h.missedWindows(), 0))
		})
	}
}

// TestUnknownSettled: a row leaves UNKNOWN for FAILED only after a lookup
// the core answered 404, one for each such change.
func TestUnknownSettled(t *testing.T) {
	f := newFixture(t)
	arrive := coresim.TruthEvent{At: at(40), Ev: coresim.TruthArrive, GUID: testGUID}
	lookup := func(ms, status int) coresim.TruthEvent {
		return coresim.TruthEvent{At: at(ms), Ev: coresim.TruthLookup, GUID: testGUID, Status: status}
	}
	entry := func(ms int, by, from, fromRsp, to, toRsp string, attempts int) ledger.Entry {
		return ledger.Entry{GUID: testGUID, At: at(ms), Command: by, StateBefore: ledger.State(from), RspBefore: fromRsp,
			StateAfter: ledger.State(to), RspAfter: toRsp, Attempts: attempts}
	}
	claim := entry(10, "relay", "", "", "SENT", "", 1)
	unknown := entry(1000, "relay", "SENT", "", "UNKNOWN", codeUnknown, 1)
	failed := entry(5000, "resolve", "UNKNOWN", codeUnknown, "FAILED", codeNotSent, 1)
	again := []ledger.Entry{entry(6000, "relay", "FAILED", codeNotSent, "SENT", codeNotSent, 2), entry(7000, "relay", "SENT", codeNotSent, "UNKNOWN", codeUnknown, 2),
		entry(9000, "resolve", "UNKNOWN", codeUnknown, "FAILED", codeNotSent, 2)}
	for _, tc := range []struct {
		name    string
		entries []ledger.Entry
		lookups []coresim.TruthEvent
		fails   bool
	}{
		{name: "settled on a 404", entries: []ledger.Entry{claim, unknown, failed}, lookups: []coresim.TruthEvent{lookup(4990, 404)}},
		{name: "no lookup", fails: true, entries: []ledger.Entry{claim, unknown, failed}},
		{name: "a lookup about another GUID", fails: true, entries: []ledger.Entry{claim, unknown, failed}, lookups: []coresim.TruthEvent{lookup(4990, 200)}},
		{name: "twice, on two 404s", entries: append([]ledger.Entry{claim, unknown, failed}, again...),
			lookups: []coresim.TruthEvent{lookup(4990, 404), lookup(8990, 404)}},
		{name: "twice, on one 404", fails: true, entries: append([]ledger.Entry{claim, unknown, failed}, again...),
			lookups: []coresim.TruthEvent{lookup(4990, 404)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			last := tc.entries[len(tc.entries)-1]
			row := f.row(ledger.StateFailed, codeNotSent, f.orig, nil)
			r := row[testGUID]
			r.Attempts = last.Attempts
			row[testGUID] = r
			h := history{tx: f.tx, attempts: []Attempt{f.attempt(codeUnknown, 0, 1000, f.orig)},
				truth: append([]coresim.TruthEvent{arrive}, tc.lookups...), rows: row,
				entries: map[string][]ledger.Entry{testGUID: tc.entries}}
			assertFails(t, h, tc.fails, "unknown-left-only-on-a-404")
		})
	}
}

// TestSettleAge: a relay's settling change comes at least its age after the
// row's last change, by the history's clock; resolve's (run with no age in
// the settling phase) and notes that change nothing are not ages.
func TestSettleAge(t *testing.T) {
	entry := func(ms int, by, why string, from, to ledger.State) ledger.Entry {
		return ledger.Entry{GUID: testGUID, At: at(ms), Command: by, Why: ledger.Why{Reason: why},
			StateBefore: from, StateAfter: to, Attempts: 1}
	}
	claim := entry(0, "relay", "claimed", "", ledger.StateSent)
	unknown := entry(1000, "relay", "core did not answer", ledger.StateSent, ledger.StateUnknown)
	note := entry(4000, "relay", "note", ledger.StateUnknown, ledger.StateUnknown)
	for _, tc := range []struct {
		name    string
		entries []ledger.Entry
		fails   bool
	}{
		{name: "UNKNOWN settled after its age", entries: []ledger.Entry{claim, unknown, entry(5000, "relay", "lookup 404: never posted", ledger.StateUnknown, ledger.StateFailed)}},
		{name: "UNKNOWN settled at once", fails: true, entries: []ledger.Entry{claim, unknown, entry(1010, "relay", "lookup 404: never posted", ledger.StateUnknown, ledger.StateFailed)}},
		{name: "a note is not a change", entries: []ledger.Entry{claim, unknown, note, entry(5000, "relay", "lookup 200: posted", ledger.StateUnknown, ledger.StateDone)}},
		{name: "SENT settled after its age", entries: []ledger.Entry{claim, entry(7000, "relay", "stale SENT, lookup 404: never posted", ledger.StateSent, ledger.StateFailed)}},
		{name: "SENT settled as soon as UNKNOWN would be", fails: true, entries: []ledger.Entry{claim, entry(4500, "relay", "stale SENT, lookup 404: never posted", ledger.StateSent, ledger.StateFailed)}},
		{name: "resolve with no age", entries: []ledger.Entry{claim, unknown, entry(1010, "resolve", "lookup 404: never posted", ledger.StateUnknown, ledger.StateFailed)}},
		{name: "the relay's own outcome", entries: []ledger.Entry{claim, entry(5, "relay", "core answered 200", ledger.StateSent, ledger.StateDone)}},
		// The relay settled the row and served the channel's resend at
		// the same time by the database's clock (verify --store postgres,
		// seed 1, schedule 430), the re-claim listed first.
		{name: "settled with the re-claim that followed it", entries: []ledger.Entry{claim, unknown,
			entry(5010, "relay", "re-claimed by the channel's resend", ledger.StateFailed, ledger.StateSent),
			entry(5010, "relay", "lookup 404: never posted", ledger.StateUnknown, ledger.StateFailed)}},
		{name: "settled too soon with the re-claim that followed it", fails: true, entries: []ledger.Entry{claim,
			entry(4500, "relay", "core did not answer", ledger.StateSent, ledger.StateUnknown),
			entry(5010, "relay", "re-claimed by the channel's resend", ledger.StateFailed, ledger.StateSent),
			entry(5010, "relay", "lookup 404: never posted", ledger.StateUnknown, ledger.StateFailed)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &guidHistory{h: &history{entries: map[string][]ledger.Entry{testGUID: tc.entries}}, guid: testGUID}
			ev := checkSettleAge(g)
			assert.Check(t, is.Equal(ev != nil, tc.fails), "%v", ev)
		})
	}
}

// TestLateAnswerRecorded: a relay that answered 0000 for a call settled
// early must have recorded that answer over the FAILED row, unless it was
// SIGKILLed since the attempt was sent; reprocess settling the row from
// its lookup does not make up for a relay that forgot it (the
// forget-late-200 plant), though the row and the postings then agree with
// the core. An early lookup that found the transfer posted (the row
// settled from SENT first) leaves the relay nothing to record.
func TestLateAnswerRecorded(t *testing.T) {
	f := newFixture(t)
	arrive := coresim.TruthEvent{At: at(40), Ev: coresim.TruthArrive, GUID: testGUID}
	earlyLookup := coresim.TruthEvent{At: at(45), Ev: coresim.TruthLookup, GUID: testGUID, Status: 404, DuringPost: true}
	truth := []coresim.TruthEvent{arrive, earlyLookup, f.posting}
	entry := func(ms int, by string, from, fromRsp, to, toRsp string, status int) ledger.Entry {
		return ledger.Entry{GUID: testGUID, At: at(ms), Command: by, StateBefore: ledger.State(from), RspBefore: fromRsp,
			StateAfter: ledger.State(to), RspAfter: toRsp, Attempts: 1, Why: ledger.Why{HTTPStatus: status}}
	}
	settled := []ledger.Entry{entry(10, "relay", "", "", "SENT", "", 0), entry(46, "resolve", "SENT", "", "FAILED", codeNotSent, 404)}
	byRelay := append(slices.Clone(settled), entry(70, "relay", "FAILED", codeNotSent, "DONE", codeOK, 200))
	byReprocess := append(slices.Clone(settled), entry(5000, "reprocess", "FAILED", codeNotSent, "DONE", codeOK, 200))
	// The early lookup came after the core posted: resolve settled the
	// row from SENT before the relay could record its answer.
	postedFirst := []ledger.Entry{entry(10, "relay", "", "", "SENT", "", 0), entry(55, "resolve", "SENT", "", "DONE", codeOK, 200)}
	early := map[string]bool{testGUID: true}
	for _, tc := range []struct {
		name    string
		entries []ledger.Entry
		early   map[string]bool
		kills   map[int][]time.Time
		truth   []coresim.TruthEvent // nil: truth
		fails   bool
	}{
		{name: "the relay recorded the late 200", entries: byRelay, early: early},
		{name: "the relay forgot it, reprocess settled it", entries: byReprocess, early: early, fails: true},
		{name: "the early lookup found it posted", entries: postedFirst, early: early, truth: []coresim.TruthEvent{arrive, f.posting,
			{At: at(52), Ev: coresim.TruthLookup, GUID: testGUID, Status: 200}}},
		{name: "the relay was killed after the answer", entries: byReprocess, early: early, kills: map[int][]time.Time{0: {at(65)}}},
		{name: "the relay was killed before the attempt", entries: byReprocess, early: early, kills: map[int][]time.Time{0: {at(-5)}}, fails: true},
		{name: "another relay was killed", entries: byReprocess, early: early, kills: map[int][]time.Time{1: {at(65)}}, fails: true},
		// (Its lookup has not overtaken the POST: no-lookup-during-post
		// holds for a GUID not settled early.)
		{name: "not settled early", entries: byReprocess, truth: []coresim.TruthEvent{arrive, f.posting}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.truth == nil {
				tc.truth = truth
			}
			h := history{tx: f.tx, attempts: []Attempt{f.attempt(codeOK, 0, 60, f.orig)}, truth: tc.truth,
				rows: f.row(ledger.StateDone, codeOK, f.orig, f.answer), early: tc.early, timeout: time.Second, kills: tc.kills,
				entries: map[string][]ledger.Entry{testGUID: tc.entries}}
			assertFails(t, h, tc.fails, "late-answer-recorded")
		})
	}
}

// assertFails checks that h fails exactly the check named, when fails, and
// no check otherwise.
func assertFails(t *testing.T, h history, fails bool, check string) {
	t.Helper()
	var failed []string
	for _, v := range h.check() {
		failed = append(failed, v.Check)
	}
	if fails {
		assert.Check(t, is.DeepEqual(failed, []string{check}))
	} else {
		assert.Check(t, is.Len(failed, 0), "%v", failed)
	}
}
