package ledger

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Test response codes. Tests may spell them; the package never does.
const (
	codeOK        = "0000"
	codeTimeout   = "E901"
	codeNoConnect = "E902"
	codeRejected  = "B201"
)

// request builds a Request the way the relay cuts it, of any body: the
// ledger compares bodies without reading them.
func request(txCode, guid string, sentAt time.Time, body string) Request {
	f := testkit.RawFrame(txCode, guid, sentAt, body)
	return Request{GUID: guid, TxCode: txCode, Frame: f, Body: f[generated.HeaderLen:]}
}

var (
	txTransfer = testkit.TransferTx().Code
	txInquiry  = testkit.ReadTx().Code
	// Two requests of one transfer that differ in the amount only.
	bodyA   = testkit.Body(testkit.TransferTx(), map[string]string{"amount": "50000", "memo": "rent"})
	bodyB   = testkit.Body(testkit.TransferTx(), map[string]string{"amount": "60000", "memo": "rent"})
	sentAt1 = testkit.SentAt
	sentAt2 = testkit.SentAt.Add(5*time.Minute + 12*time.Second)
)

// responseFrame is a stand-in for a response frame; the ledger never looks
// inside it.
func responseFrame(guid, code string) []byte {
	return []byte("R-" + guid + "-" + code + "-body")
}

func dbPath(t testing.TB) string { return filepath.Join(t.TempDir(), "relay.db") }

// openLedger opens a ledger at path and closes it when the test ends.
func openLedger(t testing.TB, path string, opts ...Option) *Ledger {
	t.Helper()
	l, err := Open(path, opts...)
	assert.NilError(t, err)
	t.Cleanup(func() { assert.Check(t, l.Close()) })
	return l
}

// newLedger opens a fresh SQLite ledger, for the tests of the SQLite
// store's own machinery (its writer and its file).
func newLedger(t testing.TB, opts ...Option) *Ledger {
	return openLedger(t, dbPath(t), opts...)
}

// eachStore runs fn as a subtest on a fresh ledger of each store: every
// rule of the state machine holds on both.
func eachStore(t *testing.T, fn func(t *testing.T, l *Ledger), opts ...Option) {
	testkit.EachStore(t, func(t *testing.T, db string) { fn(t, openLedger(t, db, opts...)) })
}

// raw reaches l's rows from outside the package, as another process would.
func raw(t testing.TB, l *Ledger) *testkit.Raw { return testkit.OpenRaw(t, l.Path(), IsURL(l.Path())) }

// tokenOf reads the claim token of guid's row: the one an unconfirmed
// claim's error would carry, had its commit landed.
func tokenOf(t testing.TB, l *Ledger, guid string) string {
	t.Helper()
	var token string
	assert.NilError(t, raw(t, l).QueryRow(`SELECT claim_token FROM tx WHERE guid = ?`, []any{guid}, &token))
	assert.Assert(t, token != "", "row %s has no claim token", guid)
	return token
}

// sqliteOf is l's SQLite store, for the tests of its writer.
func sqliteOf(l *Ledger) *sqliteStore { return l.st.(*sqliteStore) }

// rawDB is an independent connection to the same file, outside the
// package's pools: what another process would see.
func rawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	return rawDBMode(t, path, "rw")
}

// rawDBMode is rawDB with a SQLite open mode ("rwc" creates the file).
func rawDBMode(t testing.TB, path, mode string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?mode="+mode+"&_busy_timeout=10000")
	assert.NilError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// setUpdatedAt rewrites a row's updated_at directly, as tests need rows of a
// given age.
func setUpdatedAt(t testing.TB, l *Ledger, guid string, at time.Time) {
	t.Helper()
	raw(t, l).SetUpdatedAt(guid, at)
}

// seed claims a new request and moves it to state (SENT: left as claimed).
func seed(t testing.TB, l *Ledger, r Request, state State, code string) {
	t.Helper()
	ctx := context.Background()
	c, err := l.Claim(ctx, r)
	assert.NilError(t, err)
	assert.Equal(t, c.Outcome, Owned)
	if state == StateSent {
		return
	}
	assert.NilError(t, l.Finish(ctx, r.GUID, c.Attempts, Outcome{Why: Why{Reason: "test"}, State: state, RspCode: code, Response: responseFrame(r.GUID, code)}))
}

// queryPlan is SQLite's plan for q, one line a step.
func queryPlan(t testing.TB, db *sql.DB, q string, args ...any) []string {
	t.Helper()
	rows, err := db.Query("EXPLAIN QUERY PLAN "+q, args...)
	assert.NilError(t, err)
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		assert.NilError(t, rows.Scan(&id, &parent, &notused, &detail))
		plan = append(plan, detail)
	}
	assert.NilError(t, rows.Err())
	return plan
}
