package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"

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

var (
	guidSeq   atomic.Uint64
	guidEpoch = uint64(time.Now().UnixNano())
)

// newGUID returns a fresh 32-hex GUID; within a test run they increase.
func newGUID() string {
	return fmt.Sprintf("%016x%016x", guidEpoch, guidSeq.Add(1))
}

// frame builds an LH-STD request frame (80-byte header, then body).
func frame(txCode, guid, sentAt, body string) []byte {
	after := txCode + guid + "S" + "081" + "004" + "    " + sentAt + strings.Repeat(" ", 11) + body
	return []byte(fmt.Sprintf("%04d", len(after)) + after)
}

// request builds a Request the way the relay cuts it.
func request(txCode, guid, sentAt, body string) Request {
	f := frame(txCode, guid, sentAt, body)
	return Request{GUID: guid, TxCode: txCode, Frame: f, Body: f[80:]}
}

const (
	txTransfer = "BKTR0001"
	txInquiry  = "BKIQ0001"
	bodyA      = "08111002003004005004110020030040050000000050000rent                "
	bodyB      = "08111002003004005004110020030040050000000060000rent                "
	sentAt1    = "20261129103000"
	sentAt2    = "20261129103512"
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
