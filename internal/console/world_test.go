package console

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/assemble"
	"lhrelay/internal/channel"
	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/settle"
	"lhrelay/internal/testkit"
)

// The memos a channel may send that a page must show as text: each fits
// MEMO's 20 characters.
const (
	memoScript = `<script>x=1</script>`
	memoImg    = `"><img src onerror=z`
)

// world is a ledger written by real relays in front of a simulated core:
// a transfer that timed out at relay A (E901), settled by relay B's
// settler once the core had posted it, and replayed; two transfers whose
// memos are markup; one FAILED/E902 out of attempts (a core nobody
// listens on, three sends).
type world struct {
	db                              string
	settled, xssScript, xssImg, out string
	wdAcct                          string
	relay                           string // a relay still serving on the ledger, until the test ends
	down                            string // one whose core is down (E902), serving as long
	replay, stored                  []byte // the settled GUID's replayed answer and its stored response
}

// startRelay serves a relay in-process on db; settleEvery 0: no settler.
func startRelay(t *testing.T, db, core string, timeout, settleEvery time.Duration) *assemble.Relay {
	t.Helper()
	cfg := assemble.Config{Listen: "127.0.0.1:0", Core: core, DB: db, Timeout: timeout,
		LedgerOptions: []ledger.Option{ledger.WithActor(ledger.NewActor("relay"))}}
	if settleEvery > 0 {
		cfg.Settle = settle.Config{Every: settleEvery, MinAge: time.Second, StaleSent: time.Minute, TrustLookup404: true}
	}
	r, err := assemble.Start(context.Background(), cfg)
	assert.NilError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.Check(t, r.Stop(ctx))
	})
	return r
}

func sendTo(t *testing.T, addr string, frame []byte) []byte {
	t.Helper()
	c, err := channel.Dial(context.Background(), addr, 10*time.Second)
	assert.NilError(t, err)
	defer c.Close()
	raw, err := c.Send(frame)
	assert.NilError(t, err)
	return raw
}

func code(t *testing.T, raw []byte) generated.RspCode {
	t.Helper()
	a, err := channel.Decode(raw)
	assert.NilError(t, err)
	return a.Code
}

// newWorld writes the world's ledger at db (a file path or a PostgreSQL
// URL) through relays that share it, and stops them.
func newWorld(t *testing.T, db string) *world {
	t.Helper()
	sim := coresim.New(coresim.Config{Delay: 300 * time.Millisecond})
	core := httptest.NewServer(sim)
	t.Cleanup(core.Close)
	w := &world{db: db, settled: testkit.GUID(), xssScript: testkit.GUID(), xssImg: testkit.GUID(), out: testkit.GUID(), wdAcct: "11002003004007"}
	a := startRelay(t, db, core.URL, 100*time.Millisecond, 0)
	down := startRelay(t, db, testkit.ClosedURL(t), time.Second, 0)

	frame := testkit.Transfer(t, w.settled, map[string]string{"wdAcct": w.wdAcct, "memo": coresim.MemoSlow + " rent"})
	assert.Equal(t, code(t, sendTo(t, a.Addr().String(), frame)), generated.RspReadTimeout)
	// Relay B starts once the core has posted it; its settler looks it up
	// once it is a second old.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	assert.NilError(t, sim.WaitPosted(ctx, w.settled))
	b := startRelay(t, db, core.URL, 5*time.Second, 50*time.Millisecond)
	r := waitRow(t, db, w.settled, func(r ledger.Row) bool { return r.State == ledger.StateDone })
	w.stored = r.Response
	w.replay = sendTo(t, b.Addr().String(), frame)
	w.relay, w.down = b.Addr().String(), down.Addr().String()

	for guid, memo := range map[string]string{w.xssScript: memoScript, w.xssImg: memoImg} {
		f := testkit.Transfer(t, guid, map[string]string{"wdAcct": w.wdAcct, "memo": memo})
		assert.Equal(t, code(t, sendTo(t, b.Addr().String(), f)), generated.RspHTTP200)
	}
	outFrame := testkit.Transfer(t, w.out, map[string]string{"memo": "no core"})
	for range 3 {
		assert.Equal(t, code(t, sendTo(t, down.Addr().String(), outFrame)), generated.RspConnectFail)
	}
	// The relay may record an outcome after it answered: wait for the
	// rows to be as answered.
	waitRow(t, db, w.out, func(r ledger.Row) bool { return r.State == ledger.StateFailed && r.Attempts == 3 })
	for _, g := range []string{w.xssScript, w.xssImg} {
		waitRow(t, db, g, func(r ledger.Row) bool { return r.State == ledger.StateDone })
	}
	return w
}

// waitRow polls the row until ok holds (10 s at most).
func waitRow(t *testing.T, db, guid string, ok func(ledger.Row) bool) ledger.Row {
	t.Helper()
	l, err := ledger.OpenReadOnly(db)
	assert.NilError(t, err)
	defer l.Close()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		r, err := l.Get(context.Background(), guid)
		if err == nil && ok(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("row %s: %+v (%v) not as awaited within 10s", guid, r, err)
		}
		<-tick.C
	}
}

func sqliteWorld(t *testing.T) *world {
	t.Helper()
	return newWorld(t, filepath.Join(t.TempDir(), "relay.db"))
}
