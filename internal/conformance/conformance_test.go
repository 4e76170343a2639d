package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/assemble"
	"lhrelay/internal/batch"
	"lhrelay/internal/corecall"
	"lhrelay/internal/fixedwidth"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestConformance runs the table on a fresh ledger of each store per case:
// the relay as production assembles it, a core of its own, then resolve
// and reprocess on that ledger.
func TestConformance(t *testing.T) {
	cases := table(t)
	for _, store := range testkit.Stores {
		t.Run(store.Name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					e := start(t, store.New(t), c)
					switch c.kind {
					case answered:
						e.runAnswered(c)
					case rejected:
						e.runRejected(c)
					case inFlight:
						e.runInFlight(c)
					case reused:
						e.runReused(c)
					}
				})
			}
		})
	}
}

// TestTableCoversSection4: every transaction of the registry meets every
// response code of SPEC §4 in the table, so a layout added is tested
// whole, and a code added to rspmap.csv without a way to reach it fails
// here.
func TestTableCoversSection4(t *testing.T) {
	cases := table(t)
	for _, tx := range generated.Transactions() {
		var got []generated.RspCode
		for _, c := range cases {
			if c.tx == tx && !slices.Contains(got, c.want) {
				got = append(got, c.want)
			}
		}
		for _, src := range generated.Sources() {
			assert.Check(t, slices.Contains(got, src.Code()), "%s: no case answers %s (%s)", tx.Code, src.Code(), src)
		}
	}
}

// env is one case's world: its core, its relay and the relay's ledger.
type env struct {
	t     *testing.T
	core  *core
	relay *assemble.Relay
	db    string
	raw   *testkit.Raw
	tx    *generated.Transaction

	batchLedger *ledger.Ledger // resolve's and reprocess's; nil until the first
	batchCore   *corecall.Client
}

func start(t *testing.T, db string, c tcase) *env {
	e := &env{t: t, core: newCore(t), db: db, tx: c.tx}
	url := e.core.srv.URL
	if c.refused {
		url = testkit.ClosedURL(t)
	}
	log := &testkit.SyncBuffer{}
	r, err := assemble.Start(context.Background(), assemble.Config{
		Listen: "127.0.0.1:0", Core: url, Timeout: c.timeout, DB: db,
		Log: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	assert.NilError(t, err)
	t.Cleanup(func() {
		r.Close()
		if t.Failed() {
			t.Logf("relay log:\n%s", log)
		}
	})
	e.relay = r
	e.raw = testkit.OpenRaw(t, db, ledger.IsURL(db))
	return e
}

// runAnswered: the frame, the core's answer, the code, the row, a retry,
// then settling.
func (e *env) runAnswered(c tcase) {
	t := e.t
	guid := testkit.GUID()
	if !c.refused { // the relay's call never reaches this core
		e.core.program(guid, c.answer)
	}
	frame := defaultFrame(t, c.tx, guid)
	got := e.send(frame, false)
	var body []byte
	if c.want == generated.RspHTTP200 {
		body = sampleFixed(c.tx)
	}
	e.checkAnswer(got, frame, c.want, body)
	calls := 1
	if c.refused {
		calls = 0
	}
	e.checkCalls(guid, frame, calls)

	src, ok := c.want.Source()
	assert.Assert(t, ok)
	r := e.mustRow(guid)
	e.checkRow(r, frame, ledger.State(src.LedgerState()), c.want, 1)
	assert.Check(t, string(r.response) == string(got.raw), "the row's response is not the frame sent:\nrow  %q\nsent %q", r.response, got.raw)

	switch r.state {
	case ledger.StateDone:
		e.checkReplay(guid, frame)
	case ledger.StateUnknown:
		// SPEC §6: UNKNOWN → E901 without calling the core.
		again := e.send(frame, false)
		e.checkAnswer(again, frame, generated.RspReadTimeout, nil)
		e.checkCalls(guid, frame, calls)
		now := e.mustRow(guid)
		e.checkRow(now, frame, ledger.StateUnknown, generated.RspReadTimeout, 1)
	}
	e.settle(c, guid, frame, e.mustRow(guid))
}

// runRejected: answered from the raw bytes, nothing recorded, nothing
// sent, nothing for the batch commands.
func (e *env) runRejected(c tcase) {
	t := e.t
	guid := testkit.GUID()
	frame := c.frame(t, guid)
	got := e.send(frame, c.closes)
	e.checkAnswer(got, frame, c.want, nil)
	e.relay.Server().WaitRecorded()
	assert.Check(t, e.rows() == 0, "a rejected frame was recorded")
	assert.Check(t, e.core.total() == 0, "a rejected frame reached the core")

	s, err := e.resolve(time.Now())
	assert.Check(t, err)
	assert.Check(t, s.Count("selected") == 0, "%s", s)
	s, err = e.reprocess(time.Now())
	assert.Check(t, err)
	assert.Check(t, s.Count("selected") == 0, "%s", s)
	assert.Check(t, e.rows() == 0)
	assert.Check(t, e.core.total() == 0, "the batch commands called the core")
}

// runInFlight: the same request again while its call is at the core is
// E903 at once, and changes nothing; the first call then finishes.
func (e *env) runInFlight(c tcase) {
	t := e.t
	guid := testkit.GUID()
	e.core.program(guid, c.answer)
	frame := defaultFrame(t, c.tx, guid)
	first := e.dial()
	before := time.Now()
	_, err := first.Write(frame)
	assert.NilError(t, err)
	assert.Equal(t, e.core.waitArrival(t), guid)

	held := e.mustRow(guid)
	assert.Check(t, held.state == ledger.StateSent, "state %s while the call is at the core", held.state)
	assert.Check(t, held.attempts == 1)
	assert.Check(t, string(held.request) == string(frame))

	got := e.send(frame, false)
	e.checkAnswer(got, frame, c.want, nil)
	e.checkCalls(guid, frame, 1)
	assert.Check(t, e.mustRow(guid) == held, "the row changed")

	e.core.open(guid)
	ans := sent{raw: readFrame(t, first), before: before, after: time.Now()}
	e.checkAnswer(ans, frame, generated.RspHTTP200, sampleFixed(c.tx))
	r := e.mustRow(guid)
	e.checkRow(r, frame, ledger.StateDone, generated.RspHTTP200, 1)
	assert.Check(t, string(r.response) == string(ans.raw))
	e.checkCalls(guid, frame, 1)
	e.settle(c, guid, frame, r)
}

// runReused: the GUID of a posted request with another request is E904,
// and changes nothing.
func (e *env) runReused(c tcase) {
	t := e.t
	guid := testkit.GUID()
	e.core.program(guid, c.answer)
	frame := defaultFrame(t, c.tx, guid)
	first := e.send(frame, false)
	e.checkAnswer(first, frame, generated.RspHTTP200, sampleFixed(c.tx))
	r := e.mustRow(guid)

	second := c.second(t, guid)
	assert.Assert(t, string(second) != string(frame))
	got := e.send(second, false)
	e.checkAnswer(got, second, c.want, nil)
	e.checkCalls(guid, frame, 1)
	assert.Check(t, e.mustRow(guid) == r, "the row changed")
	e.checkReplay(guid, frame)
	e.settle(c, guid, frame, r)
}

// settle runs resolve and reprocess on the case's ledger and checks what
// SPEC §7 says each does with the row r left by the relay, then replays a
// settled row through the relay.
func (e *env) settle(c tcase, guid string, frame []byte, r row) {
	t := e.t
	calls := len(e.core.callsOf(guid))
	lookups := e.core.lookupsOf(guid)
	byLookup := c.tx.Settle == generated.SettleByLookup
	posted := sampleFixed(c.tx)

	switch r.state {
	case ledger.StateDone:
		total := e.core.total()
		s, err := e.resolve(time.Now())
		assert.Check(t, err)
		assert.Check(t, s.Count("selected") == 0, "%s", s)
		s, err = e.reprocess(time.Now())
		assert.Check(t, err)
		assert.Check(t, s.Count("selected") == 0, "%s", s)
		assert.Check(t, e.mustRow(guid) == r, "a DONE row changed")
		assert.Check(t, e.core.total() == total, "the batch commands called the core about nothing to settle")

	case ledger.StateUnknown:
		// Reprocess never sends an UNKNOWN row.
		total := e.core.total()
		s, err := e.reprocess(time.Now())
		assert.Check(t, err)
		assert.Check(t, s.Count("selected") == 0, "%s", s)
		assert.Check(t, e.mustRow(guid) == r, "reprocess changed an UNKNOWN row")
		assert.Check(t, e.core.total() == total, "reprocess called the core for an UNKNOWN row")

		at := time.Now()
		s, err = e.resolve(at)
		assert.Check(t, err, "resolve: %s", s)
		switch {
		case !byLookup: // FAILED/E902 with no core call
			assert.Check(t, s.Count("failed") == 1, "%s", s)
			e.checkSettledNotPosted(guid, frame, at)
			assert.Check(t, e.core.total() == total, "resolve called the core for a transaction without a lookup")
		case c.lookup == postedFirst:
			assert.Check(t, s.Count("done") == 1, "%s", s)
			e.checkPosted(guid, frame, 1, at, posted)
			assert.Check(t, e.core.lookupsOf(guid) == lookups+1)
		default: // the lookup's 404: FAILED/E902
			assert.Check(t, s.Count("failed") == 1, "%s", s)
			e.checkSettledNotPosted(guid, frame, at)
			assert.Check(t, e.core.lookupsOf(guid) == lookups+1)
		}
		e.checkCalls(guid, frame, calls)
		if c.lookup == postedLate {
			e.core.post(guid)
		}

		settled := e.mustRow(guid)
		at = time.Now()
		s, err = e.reprocess(at)
		assert.Check(t, err, "reprocess: %s", s)
		switch {
		case !byLookup: // sent again, no lookup: a read
			assert.Check(t, s.Count("selected") == 1 && s.Count(string(generated.RspHTTP200)) == 1, "%s", s)
			e.checkPosted(guid, frame, 2, at, posted)
			e.checkCalls(guid, frame, calls+1)
			assert.Check(t, e.core.lookupsOf(guid) == 0)
		case c.lookup == postedFirst: // DONE already: untouched
			assert.Check(t, s.Count("selected") == 0, "%s", s)
			assert.Check(t, e.mustRow(guid) == settled, "reprocess changed a DONE row")
			e.checkCalls(guid, frame, calls)
		case c.lookup == postedLate: // looked up first: 200, not sent
			assert.Check(t, s.Count("selected") == 1 && s.Count(batch.OutcomePostedAlready) == 1, "%s", s)
			e.checkPosted(guid, frame, 1, at, posted)
			e.checkCalls(guid, frame, calls)
			assert.Check(t, e.core.lookupsOf(guid) == lookups+2)
		default: // looked up first: 404, sent once
			assert.Check(t, s.Count("selected") == 1 && s.Count(string(generated.RspHTTP200)) == 1, "%s", s)
			e.checkPosted(guid, frame, 2, at, posted)
			e.checkCalls(guid, frame, calls+1)
			assert.Check(t, e.core.lookupsOf(guid) == lookups+2)
		}

	case ledger.StateFailed:
		total := e.core.total()
		s, err := e.resolve(time.Now())
		assert.Check(t, err)
		assert.Check(t, s.Count("selected") == 0, "%s", s)
		assert.Check(t, e.mustRow(guid) == r, "resolve changed a FAILED row")
		assert.Check(t, e.core.total() == total, "resolve called the core about nothing to settle")

		at := time.Now()
		s, err = e.reprocess(at)
		assert.Check(t, err, "reprocess: %s", s)
		assert.Check(t, s.Count("selected") == 1 && s.Count(string(generated.RspHTTP200)) == 1, "%s", s)
		e.checkPosted(guid, frame, 2, at, posted)
		e.checkCalls(guid, frame, calls+1)
		want := 0
		if byLookup {
			want = 1 // looked up first: 404, then sent
		}
		assert.Check(t, e.core.lookupsOf(guid) == lookups+want, "lookups %d", e.core.lookupsOf(guid)-lookups)

	default:
		t.Fatalf("the relay left the row %s", r.state)
	}

	if e.mustRow(guid).state == ledger.StateDone {
		e.checkReplay(guid, frame)
	}
}

// checkPosted: the row is DONE/0000 with a response built from the
// stored request's header and body, at the SENT_AT of the batch run at.
func (e *env) checkPosted(guid string, frame []byte, attempts int, at time.Time, body []byte) {
	e.t.Helper()
	r := e.mustRow(guid)
	e.checkRow(r, frame, ledger.StateDone, generated.RspHTTP200, attempts)
	want := expectedAnswer(frame, generated.RspHTTP200, fixedwidth.FormatTimestamp(at), body)
	assert.Check(e.t, string(r.response) == string(want), "response\ngot  %q\nwant %q", r.response, want)
}

// checkSettledNotPosted: the row is FAILED/E902, still at its first
// attempt; a response, if one is stored, is the E902 answer to the
// request.
func (e *env) checkSettledNotPosted(guid string, frame []byte, at time.Time) {
	e.t.Helper()
	r := e.mustRow(guid)
	e.checkRow(r, frame, ledger.StateFailed, generated.RspConnectFail, 1)
	if r.response != "" {
		want := expectedAnswer(frame, generated.RspConnectFail, fixedwidth.FormatTimestamp(at), nil)
		assert.Check(e.t, string(r.response) == string(want), "response\ngot  %q\nwant %q", r.response, want)
	}
}

// checkReplay: the request again, with another SENT_AT, is answered the
// stored response byte for byte, without a core call or a change.
func (e *env) checkReplay(guid string, frame []byte) {
	e.t.Helper()
	r := e.mustRow(guid)
	calls := len(e.core.callsOf(guid))
	retry := append([]byte(nil), frame...)
	copy(retry[generated.HeaderSentAtOffset:], fixedwidth.FormatTimestamp(testkit.SentAt.Add(time.Hour)))
	got := e.send(retry, false)
	assert.Check(e.t, string(got.raw) == string(r.response), "replay\ngot    %q\nstored %q", got.raw, r.response)
	assert.Check(e.t, len(e.core.callsOf(guid)) == calls, "a replay called the core")
	assert.Check(e.t, e.mustRow(guid) == r, "a replay changed the row")
}

// sent is an answer and when it was awaited.
type sent struct {
	raw           []byte
	before, after time.Time
}

// dial connects to the relay, with a deadline that keeps a broken case
// from hanging.
func (e *env) dial() net.Conn {
	c, err := net.Dial("tcp", e.relay.Addr().String())
	assert.NilError(e.t, err)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	e.t.Cleanup(func() { c.Close() })
	return c
}

// send sends frame on a new connection and reads the answer; closes: the
// relay must then close the connection.
func (e *env) send(frame []byte, closes bool) sent {
	e.t.Helper()
	c := e.dial()
	defer c.Close()
	s := sent{before: time.Now()}
	_, err := c.Write(frame)
	assert.NilError(e.t, err)
	s.raw = readFrame(e.t, c)
	s.after = time.Now()
	if closes {
		rest, err := io.ReadAll(c)
		assert.Check(e.t, err == nil && len(rest) == 0, "after the answer: %q, %v (want the connection closed)", rest, err)
	}
	return s
}

// readFrame reads one frame: 4 ASCII digits, then that many bytes.
func readFrame(t *testing.T, c net.Conn) []byte {
	t.Helper()
	prefix := make([]byte, generated.PrefixLen)
	_, err := io.ReadFull(c, prefix)
	assert.NilError(t, err, "reading the answer's length prefix")
	n, err := strconv.Atoi(string(prefix))
	assert.NilError(t, err, "the answer's length prefix %q", prefix)
	rest := make([]byte, n)
	_, err = io.ReadFull(c, rest)
	assert.NilError(t, err, "reading the answer's %d bytes", n)
	return append(prefix, rest...)
}

// checkAnswer: got is the response to req that SPEC §1 describes, with
// code and body, and a SENT_AT of the relay's clock while it was awaited.
func (e *env) checkAnswer(got sent, req []byte, code generated.RspCode, body []byte) {
	t := e.t
	t.Helper()
	assert.Assert(t, len(got.raw) >= generated.HeaderLen, "answer %q", got.raw)
	stamp := string(got.raw[generated.HeaderSentAtOffset : generated.HeaderSentAtOffset+generated.HeaderSentAtWidth])
	at, err := time.ParseInLocation(fixedwidth.TimestampLayout, stamp, time.Local)
	assert.Check(t, err, "SENT_AT %q", stamp)
	if err == nil {
		assert.Check(t, !at.Before(got.before.Truncate(time.Second)) && !at.After(got.after), "SENT_AT %s, not between %s and %s", stamp, got.before, got.after)
	}
	want := expectedAnswer(req, code, stamp, body)
	assert.Check(t, string(got.raw) == string(want), "answer\ngot  %q\nwant %q", got.raw, want)
}

// expectedAnswer is the response to req (SPEC §1, §5.2): its TX_CODE and
// GUID as found at their positions, FLAG R, its institutions swapped, code
// and sentAt, and body (only with 0000), with LEN counting what follows
// it. It is built here from the header layout's offsets, by none of the
// product's encoders.
func expectedAnswer(req []byte, code generated.RspCode, sentAt string, body []byte) []byte {
	out := make([]byte, generated.HeaderLen, generated.HeaderLen+len(body))
	for i := range out {
		out[i] = ' '
	}
	copy(out, fmt.Sprintf("%0*d", generated.PrefixLen, generated.HeaderLen-generated.PrefixLen+len(body)))
	raw := func(at, width int) []byte {
		f := make([]byte, width)
		for i := range f {
			f[i] = ' '
			if at+i < len(req) && req[at+i] >= 0x20 && req[at+i] <= 0x7e {
				f[i] = req[at+i]
			}
		}
		return f
	}
	copy(out[generated.HeaderTxCodeOffset:], raw(generated.HeaderTxCodeOffset, generated.HeaderTxCodeWidth))
	copy(out[generated.HeaderGUIDOffset:], raw(generated.HeaderGUIDOffset, generated.HeaderGUIDWidth))
	copy(out[generated.HeaderFlagOffset:], generated.FlagResponse)
	copy(out[generated.HeaderSrcOrgOffset:], raw(generated.HeaderDstOrgOffset, generated.HeaderDstOrgWidth))
	copy(out[generated.HeaderDstOrgOffset:], raw(generated.HeaderSrcOrgOffset, generated.HeaderSrcOrgWidth))
	copy(out[generated.HeaderRspCodeOffset:], code)
	copy(out[generated.HeaderSentAtOffset:], sentAt)
	return append(out, body...)
}

// checkCalls: the core got n calls about guid, each the transaction's
// call for the request frame (SPEC §3): its method and path, and the
// request in the core's JSON with the GUID when the call carries one.
func (e *env) checkCalls(guid string, frame []byte, n int) {
	t := e.t
	t.Helper()
	calls := e.core.callsOf(guid)
	assert.Check(t, len(calls) == n, "%d core calls about %s, want %d", len(calls), guid, n)
	req := e.tx.NewRequest()
	assert.NilError(t, req.Decode(string(frame[generated.HeaderLen:])))
	path, err := req.CorePath()
	assert.NilError(t, err)
	for _, c := range calls {
		assert.Check(t, c.method == e.tx.Method && c.path == path, "call %s %s, want %s %s", c.method, c.path, e.tx.Method, path)
		if !e.tx.JSONBody {
			assert.Check(t, len(c.body) == 0, "a %s call carried %q", e.tx.Code, c.body)
			continue
		}
		mt, _, _ := mime.ParseMediaType(c.contentType)
		assert.Check(t, mt == "application/json", "Content-Type %q", c.contentType)
		var got map[string]any
		assert.Check(t, json.Unmarshal(c.body, &got), "call body %q", c.body)
		assert.Check(t, got["guid"] == guid, "call body %q", c.body)
		for _, f := range e.tx.RequestFields {
			_, ok := got[f.JSON]
			assert.Check(t, ok, "call body %q has no %s", c.body, f.JSON)
		}
	}
}

// row is a ledger row as SPEC §6 defines its columns, read with SQL as
// any other process would.
type row struct {
	txCode, rspCode   string
	state             ledger.State
	request, response string
	attempts          int
	updatedAt         string
}

// mustRow reads guid's row, once every outcome answered is recorded.
func (e *env) mustRow(guid string) row {
	e.t.Helper()
	e.relay.Server().WaitRecorded()
	var r row
	var state string
	var req, rsp []byte
	err := e.raw.QueryRow(`SELECT tx_code, state, COALESCE(rsp_code, ''), request, response, COALESCE(attempts, 0), CAST(updated_at AS TEXT) FROM tx WHERE guid = ?`,
		[]any{guid}, &r.txCode, &state, &r.rspCode, &req, &rsp, &r.attempts, &r.updatedAt)
	assert.NilError(e.t, err, "the row of %s", guid)
	r.state, r.request, r.response = ledger.State(state), string(req), string(rsp)
	return r
}

// rows counts the ledger's rows.
func (e *env) rows() int {
	e.t.Helper()
	var n int64
	assert.NilError(e.t, e.raw.QueryRow(`SELECT COUNT(*) FROM tx`, nil, &n))
	return int(n)
}

// checkRow: r records the request frame with state, code and attempts.
func (e *env) checkRow(r row, frame []byte, state ledger.State, code generated.RspCode, attempts int) {
	t := e.t
	t.Helper()
	assert.Check(t, r.txCode == e.tx.Code, "tx_code %q", r.txCode)
	assert.Check(t, r.state == state, "state %s, want %s", r.state, state)
	assert.Check(t, r.rspCode == string(code), "rsp_code %q, want %s", r.rspCode, code)
	assert.Check(t, r.attempts == attempts, "attempts %d, want %d", r.attempts, attempts)
	assert.Check(t, r.request == string(frame), "request\nrow  %q\nsent %q", r.request, frame)
}

// resolve runs resolve on the case's ledger as the command does, with a
// ledger handle and a core client of its own, --min-age 0.
func (e *env) resolve(now time.Time) (*batch.Summary, error) {
	l, core := e.batchSides()
	return batch.Resolve(context.Background(), l, core, batch.ResolveConfig{Now: now})
}

// reprocess runs reprocess likewise, --max-attempts 3.
func (e *env) reprocess(now time.Time) (*batch.Summary, error) {
	l, core := e.batchSides()
	return batch.Reprocess(context.Background(), l, core, batch.ReprocessConfig{MaxAttempts: 3, Now: now})
}

// batchSides are the ledger handle and core client the batch runs share,
// opened by the first, once every outcome answered is recorded.
func (e *env) batchSides() (*ledger.Ledger, *corecall.Client) {
	t := e.t
	t.Helper()
	e.relay.Server().WaitRecorded()
	if e.batchLedger == nil {
		l, err := ledger.OpenExisting(e.db)
		assert.NilError(t, err)
		t.Cleanup(func() { l.Close() })
		core, err := corecall.New(corecall.Config{BaseURL: e.core.srv.URL, Timeout: relayTimeout, MaxIdleConns: 4})
		assert.NilError(t, err)
		t.Cleanup(core.CloseIdleConnections)
		e.batchLedger, e.batchCore = l, core
	}
	return e.batchLedger, e.batchCore
}
