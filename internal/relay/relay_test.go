package relay

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/testkit"
)

// TestSpecCodes sends one frame per row of SPEC §4 that a single request
// can produce, through a relay with a ledger in front of the simulated core.
func TestSpecCodes(t *testing.T) {
	sim := simCore(300 * time.Millisecond)
	e := startEnv(t, envConfig{core: sim, ledger: true, timeout: 100 * time.Millisecond})
	for _, tc := range []struct {
		name  string
		frame func(guid string) []byte
		want  generated.RspCode
		state ledger.State // "" = no row
		calls int          // POST /v1/transfers it causes
	}{
		{"0000 posted", func(g string) []byte { return transferFrame(t, g) }, generated.RspHTTP200, ledger.StateDone, 1},
		{"B201 insufficient funds", func(g string) []byte { return transferFrame(t, g, wdAcct(acctEmpty)) }, generated.RspInsufficientFunds, ledger.StateDone, 1},
		{"B202 no account", func(g string) []byte { return transferFrame(t, g, wdAcct(acctNone)) }, generated.RspNoAccount, ledger.StateDone, 1},
		{"B202 inquiry of an unknown account (layout status rule)", func(g string) []byte { return inquiryFrame(t, g, acctNone) }, generated.RspNoAccount, ledger.StateDone, 0},
		{"B203 over the limit", func(g string) []byte { return transferFrame(t, g, amount(20_000_000)) }, generated.RspLimitExceeded, ledger.StateDone, 1},
		{"E500 core error", func(g string) []byte { return transferFrame(t, g, memo("FAIL please")) }, generated.RspHTTP500, ledger.StateDone, 1},
		{"E901 core too slow", func(g string) []byte { return transferFrame(t, g, memo("SLOW")) }, generated.RspReadTimeout, ledger.StateUnknown, 1},
		{"E101 unknown transaction", func(g string) []byte {
			f := transferFrame(t, g)
			copy(f[4:12], "BKXX0009")
			return f
		}, generated.RspUnknownTx, "", 0},
		{"E102 amount 0", func(g string) []byte {
			f := transferFrame(t, g)
			copy(f[generated.HeaderLen+34:], "0000000000000") // AMOUNT, which AppendFrame refuses to encode as 0
			return f
		}, generated.RspBadFrame, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			guid := testkit.GUID()
			before := sim.Stats().Calls
			a := e.roundTrip(tc.frame(guid))
			assert.Equal(t, a.code(), string(tc.want))
			assert.Equal(t, a.hdr.GUID, guid)
			assert.Equal(t, a.hdr.SrcOrg, "999", "institutions swapped")
			assert.Equal(t, a.hdr.DstOrg, "081")
			if tc.want == generated.RspHTTP200 {
				var body generated.BKTR0001Response
				assert.NilError(t, body.Decode(string(a.raw[generated.HeaderLen:])))
				assert.Equal(t, body.Balance, int64(1_000_000-50_000))
			} else {
				assert.Equal(t, len(a.raw), generated.HeaderLen, "no body with %s", tc.want)
			}
			if tc.want == generated.RspReadTimeout {
				// The core posts anyway, once, after the relay gave up.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				assert.NilError(t, sim.WaitPosted(ctx, guid))
				assert.Equal(t, sim.PostCount(guid), 1)
			}
			assert.Equal(t, sim.Stats().Calls-before, tc.calls)
			if tc.state == "" {
				e.noRow(guid)
				return
			}
			r := e.row(guid)
			assert.Equal(t, r.State, tc.state)
			assert.Equal(t, r.RspCode, string(tc.want))
			assert.DeepEqual(t, r.Response, a.raw)
			assert.Equal(t, r.Attempts, 1)
		})
	}
}

func TestInquiry(t *testing.T) {
	e := startEnv(t, envConfig{core: simCore(0)})
	a := e.roundTrip(inquiryFrame(t, testkit.GUID(), acctRich))
	assert.Equal(t, a.code(), string(generated.RspHTTP200))
	var body generated.BKIQ0001Response
	assert.NilError(t, body.Decode(string(a.raw[generated.HeaderLen:])))
	assert.Equal(t, body.Balance, int64(1_000_000))
}

func TestConnectRefusedIsE902(t *testing.T) {
	e := startEnv(t, envConfig{coreURL: testkit.ClosedURL(t), ledger: true})
	guid := testkit.GUID()
	a := e.roundTrip(transferFrame(t, guid))
	assert.Equal(t, a.code(), string(generated.RspConnectFail))
	r := e.row(guid)
	assert.Equal(t, r.State, ledger.StateFailed)
	assert.Equal(t, r.RspCode, string(generated.RspConnectFail))
}

func TestConnectTimeoutIsE902(t *testing.T) {
	e := startEnv(t, envConfig{coreURL: "http://192.0.2.1:9", dial: blockingDial, connectTimeout: 100 * time.Millisecond, timeout: 5 * time.Second})
	start := time.Now()
	a := e.roundTrip(transferFrame(t, testkit.GUID()))
	assert.Equal(t, a.code(), string(generated.RspConnectFail))
	assert.Assert(t, time.Since(start) < 2*time.Second)
}

// TestCoreAnswers covers the core answers the simulator does not give.
func TestCoreAnswers(t *testing.T) {
	for _, tc := range []struct {
		name string
		core http.Handler
		want generated.RspCode
	}{
		{"504", reply(504, ``), generated.RspReadTimeout},
		{"200 garbage", reply(200, `{"txId":"T1","bal`), generated.RspReadTimeout},
		{"200 value too long for the layout", reply(200, `{"txId":"T0000000000000001X","balance":1,"postedAt":"20261129103000"}`), generated.RspReadTimeout},
		{"422 unknown result", reply(422, `{"result":"ACCOUNT_FROZEN"}`), generated.RspHTTP500},
		{"400", reply(400, `{"error":"bad"}`), generated.RspHTTP500},
		{"closed after reading the request", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				c.Close()
			}
		}), generated.RspReadTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core := &counting{h: tc.core}
			e := startEnv(t, envConfig{core: core, ledger: true})
			guid := testkit.GUID()
			a := e.roundTrip(transferFrame(t, guid))
			assert.Equal(t, a.code(), string(tc.want))
			assert.Equal(t, core.calls.Load(), int64(1))
			src, _ := tc.want.Source()
			assert.Equal(t, string(e.row(guid).State), src.LedgerState())
		})
	}
}

// TestLongHeaderLineIsAnAnswer: a valid 200 carrying one header line
// longer than the core client's read buffer (a gateway's trace header or
// cookie) is the posted transfer, answered 0000 and recorded DONE.
func TestLongHeaderLineIsAnAnswer(t *testing.T) {
	sim := simCore(0)
	trace := strings.Repeat("t", 5<<10)
	core := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Gateway-Trace", trace)
		sim.ServeHTTP(w, r)
	})
	e := startEnv(t, envConfig{core: core, ledger: true})
	guid := testkit.GUID()
	a := e.roundTrip(transferFrame(t, guid))
	assert.Equal(t, a.code(), string(generated.RspHTTP200))
	assert.Equal(t, sim.PostCount(guid), 1)
	r := e.row(guid)
	assert.Equal(t, r.State, ledger.StateDone)
	assert.Assert(t, bytes.Equal(r.Response, a.raw))
}

func TestTimeoutIsE901WithinTimeout(t *testing.T) {
	g := newGate(reply(200, `{}`))
	defer g.Open()
	const timeout = 200 * time.Millisecond
	e := startEnv(t, envConfig{core: g, timeout: timeout})
	start := time.Now()
	a := e.roundTrip(transferFrame(t, testkit.GUID()))
	elapsed := time.Since(start)
	assert.Equal(t, a.code(), string(generated.RspReadTimeout))
	assert.Assert(t, elapsed >= timeout && elapsed < timeout+time.Second, "answered after %v", elapsed)
}

func TestOneByteAtATime(t *testing.T) {
	e := startEnv(t, envConfig{core: simCore(0)})
	c := e.dial()
	f := transferFrame(t, testkit.GUID())
	for i := range f {
		_, err := c.Write(f[i : i+1])
		assert.NilError(t, err)
	}
	assert.Equal(t, e.read(c).code(), string(generated.RspHTTP200))
}

func TestTwoFramesInOneWrite(t *testing.T) {
	e := startEnv(t, envConfig{core: simCore(0)})
	c := e.dial()
	g1, g2 := testkit.GUID(), testkit.GUID()
	_, err := c.Write(append(transferFrame(t, g1), transferFrame(t, g2, wdAcct(acctEmpty))...))
	assert.NilError(t, err)
	a1, a2 := e.read(c), e.read(c)
	assert.Equal(t, a1.hdr.GUID, g1)
	assert.Equal(t, a1.code(), string(generated.RspHTTP200))
	assert.Equal(t, a2.hdr.GUID, g2)
	assert.Equal(t, a2.code(), string(generated.RspInsufficientFunds))
}

func TestHalfClose(t *testing.T) {
	e := startEnv(t, envConfig{core: simCore(0)})
	c := e.dial()
	g1, g2 := testkit.GUID(), testkit.GUID()
	_, err := c.Write(append(transferFrame(t, g1), transferFrame(t, g2)...))
	assert.NilError(t, err)
	assert.NilError(t, c.(*net.TCPConn).CloseWrite())
	assert.Equal(t, e.read(c).hdr.GUID, g1)
	assert.Equal(t, e.read(c).hdr.GUID, g2)
	expectClosed(t, c)
}

// TestRejectsNeverCallCore: E101 and E102 call nothing and record nothing,
// and the connection goes on.
func TestRejectsNeverCallCore(t *testing.T) {
	core := &counting{h: reply(200, `{}`)}
	e := startEnv(t, envConfig{core: core, ledger: true})
	c := e.dial()
	mutate := func(f func([]byte) []byte) func(string) []byte {
		return func(g string) []byte { return f(transferFrame(t, g)) }
	}
	for _, tc := range []struct {
		name  string
		frame func(guid string) []byte
		want  generated.RspCode
	}{
		{"unknown TX_CODE", mutate(func(f []byte) []byte { copy(f[4:12], "ZZZZ0001"); return f }), generated.RspUnknownTx},
		{"TX_CODE in lower case", mutate(func(f []byte) []byte { copy(f[4:12], "bktr0001"); return f }), generated.RspUnknownTx},
		{"GUID in upper case", mutate(func(f []byte) []byte { copy(f[12:14], "AB"); return f }), generated.RspBadFrame},
		{"FLAG R", mutate(func(f []byte) []byte { f[44] = 'R'; return f }), generated.RspBadFrame},
		{"bad SENT_AT", mutate(func(f []byte) []byte { copy(f[55:69], "20261329103000"); return f }), generated.RspBadFrame},
		{"non-printable byte in the body", mutate(func(f []byte) []byte { f[len(f)-1] = 0x7f; return f }), generated.RspBadFrame},
		{"non-printable byte in the header", mutate(func(f []byte) []byte { f[70] = '\n'; return f }), generated.RspBadFrame},
		{"letters in the amount", mutate(func(f []byte) []byte { f[generated.HeaderLen+40] = 'x'; return f }), generated.RspBadFrame},
		{"bank not in the map", mutate(func(f []byte) []byte { copy(f[generated.HeaderLen:], "999"); return f }), generated.RspBadFrame},
		{"body one byte short", mutate(func(f []byte) []byte { f = f[:len(f)-1]; copy(f, "0142"); return f }), generated.RspBadFrame},
		{"body one byte long", mutate(func(f []byte) []byte { f = append(f, ' '); copy(f, "0144"); return f }), generated.RspBadFrame},
		{"LEN below the header", func(string) []byte { return []byte("0075" + strings.Repeat(" ", 75)) }, generated.RspBadFrame},
		{"LEN 0", func(string) []byte { return []byte("0000") }, generated.RspBadFrame},
	} {
		t.Run(tc.name, func(t *testing.T) {
			guid := testkit.GUID()
			a := e.send(c, tc.frame(guid))
			assert.Equal(t, a.code(), string(tc.want))
			assert.Equal(t, len(a.raw), generated.HeaderLen)
			e.noRow(guid)
		})
	}
	assert.Equal(t, core.calls.Load(), int64(0))
	// The connection is still good.
	core.h = posted("")
	assert.Equal(t, e.send(c, transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
}

func TestRejectionEchoesRawHeader(t *testing.T) {
	e := startEnv(t, envConfig{core: reply(500, ``)})
	f := transferFrame(t, testkit.GUID())
	copy(f[12:16], "XYZ!") // GUID not hex: unparseable header
	a := e.roundTrip(f)
	assert.Equal(t, a.code(), string(generated.RspBadFrame))
	assert.Equal(t, string(a.raw[4:44]), string(f[4:44]), "TX_CODE and GUID echoed as found")
	assert.Equal(t, a.hdr.SrcOrg, "999")
	assert.Equal(t, a.hdr.DstOrg, "081")
}

func TestPrefixNotDigits(t *testing.T) {
	core := &counting{h: reply(500, ``)}
	e := startEnv(t, envConfig{core: core})
	c := e.dial()
	f := transferFrame(t, testkit.GUID())
	copy(f, "01x3")
	_, err := c.Write(f)
	assert.NilError(t, err)
	a := e.read(c)
	assert.Equal(t, a.code(), string(generated.RspBadFrame))
	assert.Equal(t, string(a.raw[4:44]), strings.Repeat(" ", 40), "TX_CODE and GUID blank")
	expectClosed(t, c)
	assert.Equal(t, core.calls.Load(), int64(0))
}

// TestSlowCallDoesNotDelayOthers: one connection waits on the core while
// another's frame is answered.
func TestSlowCallDoesNotDelayOthers(t *testing.T) {
	slowGUID := testkit.GUID()
	g := testkit.NewGate(16).Only(testkit.ForGUID(slowGUID))
	defer g.Open()
	core := gatedSim(g)
	e := startEnv(t, envConfig{core: core})
	slow := e.dial()
	_, err := slow.Write(transferFrame(t, slowGUID))
	assert.NilError(t, err)
	g.WaitArrival(t)

	fast := e.roundTrip(transferFrame(t, testkit.GUID()))
	assert.Equal(t, fast.code(), string(generated.RspHTTP200))

	g.Open()
	assert.Equal(t, e.read(slow).code(), string(generated.RspHTTP200))
}

func TestFrameTimeout(t *testing.T) {
	core := &counting{h: reply(500, ``)}
	e := startEnv(t, envConfig{core: core, frameTimeout: 150 * time.Millisecond})
	c := e.dial()
	f := transferFrame(t, testkit.GUID())
	start := time.Now()
	_, err := c.Write(f[:30])
	assert.NilError(t, err)
	expectClosed(t, c)
	assert.Assert(t, time.Since(start) < 2*time.Second)
	assert.Equal(t, core.calls.Load(), int64(0))
	assert.Assert(t, strings.Contains(e.log.String(), "frame timeout"))
}

func TestIdleTimeout(t *testing.T) {
	e := startEnv(t, envConfig{core: simCore(0), idleTimeout: 150 * time.Millisecond})
	c := e.dial()
	assert.Equal(t, e.send(c, transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
	start := time.Now()
	expectClosed(t, c)
	assert.Assert(t, time.Since(start) < 2*time.Second)
	assert.Assert(t, strings.Contains(e.log.String(), "idle timeout"))
}

// TestMaxConns: past the limit a connection is closed unread; once a slot
// is free, connections are served again.
func TestMaxConns(t *testing.T) {
	gone := make(chan struct{}, 8)
	e := startEnv(t, envConfig{core: simCore(0), maxConns: 2, maxPerAddr: 2, connDone: func() { gone <- struct{}{} }})
	c1, c2 := e.dial(), e.dial()
	// An answer proves each was admitted.
	assert.Equal(t, e.send(c1, transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
	assert.Equal(t, e.send(c2, transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))

	c3 := e.dial()
	c3.Write(transferFrame(t, testkit.GUID()))
	expectClosed(t, c3)
	assert.Equal(t, e.srv.Rejected(), int64(1))
	assert.Equal(t, e.srv.Conns(), 2)

	c1.Close()
	<-gone
	c4 := e.dial()
	assert.Equal(t, e.send(c4, transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
	assert.Assert(t, strings.Contains(e.log.String(), "max-conns reached"))
}

// TestStaleKeepAlive: the core closes the relay's idle keep-alive
// connection; the next frame is still answered correctly.
func TestStaleKeepAlive(t *testing.T) {
	closed := make(chan struct{}, 4)
	var d net.Dialer
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &notifyClose{Conn: c, closed: closed}, nil
	}
	sim := simCore(0)
	e := startEnv(t, envConfig{core: sim, dial: dial})
	c := e.dial()
	assert.Equal(t, e.send(c, transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
	e.core.CloseClientConnections()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the relay's HTTP transport did not notice the core closing")
	}
	assert.Equal(t, e.send(c, transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
	assert.Equal(t, sim.Stats().Calls, 2)
}

type notifyClose struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (n *notifyClose) Close() error {
	n.once.Do(func() { n.closed <- struct{}{} })
	return n.Conn.Close()
}

// TestShutdownFinishesFrameInFlight: the frame in flight is answered and
// recorded, idle connections are closed, new ones refused, and Shutdown
// returns nil.
func TestShutdownFinishesFrameInFlight(t *testing.T) {
	inflight := testkit.GUID()
	g := testkit.NewGate(16).Only(testkit.ForGUID(inflight))
	defer g.Open()
	core := gatedSim(g)
	e := startEnv(t, envConfig{core: core, ledger: true})
	idle := e.dial()
	assert.Equal(t, e.send(idle, transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
	busy := e.dial()
	_, err := busy.Write(transferFrame(t, inflight))
	assert.NilError(t, err)
	g.WaitArrival(t)

	stopped := make(chan error, 1)
	go func() { stopped <- e.srv.Shutdown(context.Background()) }()
	expectClosed(t, idle) // closed while waiting for a frame
	assert.ErrorIs(t, <-e.done, ErrServerClosed)
	_, err = net.Dial("tcp", e.addr)
	assert.Assert(t, err != nil, "no longer accepting")
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned %v with a frame in flight", err)
	default:
	}

	g.Open()
	a := e.read(busy)
	assert.Equal(t, a.code(), string(generated.RspHTTP200))
	expectClosed(t, busy)
	assert.NilError(t, <-stopped)
	assert.Equal(t, e.row(inflight).State, ledger.StateDone)
}

// TestShutdownDeadline: when Shutdown's context ends first, the call in
// flight is cancelled, classified and recorded: no row is left SENT.
func TestShutdownDeadline(t *testing.T) {
	g := newGate(reply(200, `{}`))
	defer g.Open()
	e := startEnv(t, envConfig{core: g, ledger: true, timeout: time.Minute})
	busy := e.dial()
	guid := testkit.GUID()
	_, err := busy.Write(transferFrame(t, guid))
	assert.NilError(t, err)
	g.WaitArrival(t)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, e.srv.Shutdown(ctx), context.DeadlineExceeded)
	r := e.row(guid)
	assert.Equal(t, r.State, ledger.StateUnknown)
	assert.Equal(t, r.RspCode, string(generated.RspReadTimeout))
}

func TestPanicRecovery(t *testing.T) {
	for _, tc := range []struct {
		at    stage
		want  generated.RspCode
		state ledger.State // "" = no row
		calls int64
	}{
		{stageValidating, generated.RspConnectFail, "", 0},
		{stageClaimed, generated.RspConnectFail, ledger.StateFailed, 0},
		{stageCalling, generated.RspReadTimeout, ledger.StateUnknown, 0},
		{stageRecorded, generated.RspHTTP200, ledger.StateDone, 1},
	} {
		t.Run(tc.at.String(), func(t *testing.T) {
			core := &counting{h: simCore(0)}
			var armed sync.Once
			hook := func(st stage) {
				if st == tc.at {
					fire := false
					armed.Do(func() { fire = true })
					if fire {
						panic("test panic at " + st.String())
					}
				}
			}
			e := startEnv(t, envConfig{core: core, ledger: true, hook: hook})
			c := e.dial()
			guid := testkit.GUID()
			a := e.send(c, transferFrame(t, guid))
			assert.Equal(t, a.code(), string(tc.want))
			assert.Equal(t, a.hdr.GUID, guid)
			expectClosed(t, c)
			assert.Equal(t, core.calls.Load(), tc.calls)
			if tc.state == "" {
				e.noRow(guid)
			} else {
				r := e.row(guid)
				assert.Equal(t, r.State, tc.state)
				assert.DeepEqual(t, r.Response, a.raw)
			}
			log := e.log.String()
			assert.Assert(t, strings.Contains(log, "test panic at"), log)
			assert.Assert(t, strings.Contains(log, "goroutine"), "stack logged")

			// The relay goes on serving.
			assert.Equal(t, e.roundTrip(transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
		})
	}
}

func TestLedgerReplay(t *testing.T) {
	sim := simCore(0)
	e := startEnv(t, envConfig{core: sim, ledger: true})
	guid := testkit.GUID()
	f := transferFrame(t, guid)
	first := e.roundTrip(f)
	assert.Equal(t, first.code(), string(generated.RspHTTP200))

	// A retry, with a new SENT_AT, gets the stored answer byte for byte.
	copy(f[55:69], "20261129110000")
	again := e.roundTrip(f)
	assert.Assert(t, bytes.Equal(again.raw, first.raw))
	assert.Equal(t, sim.PostCount(guid), 1)
	assert.Equal(t, sim.Stats().Calls, 1)
}

func TestLedgerGUIDReused(t *testing.T) {
	sim := simCore(0)
	e := startEnv(t, envConfig{core: sim, ledger: true})
	guid := testkit.GUID()
	assert.Equal(t, e.roundTrip(transferFrame(t, guid)).code(), string(generated.RspHTTP200))
	a := e.roundTrip(transferFrame(t, guid, amount(1)))
	assert.Equal(t, a.code(), string(generated.RspGUIDReused))
	assert.Equal(t, len(a.raw), generated.HeaderLen)
	assert.Equal(t, sim.Stats().Calls, 1)
	assert.Equal(t, e.row(guid).State, ledger.StateDone)
}

func TestLedgerInProgress(t *testing.T) {
	g := testkit.NewGate(16)
	defer g.Open()
	e := startEnv(t, envConfig{core: gatedSim(g), ledger: true})
	guid := testkit.GUID()
	first := e.dial()
	_, err := first.Write(transferFrame(t, guid))
	assert.NilError(t, err)
	g.WaitArrival(t) // claimed (SENT) and at the core

	start := time.Now()
	a := e.roundTrip(transferFrame(t, guid))
	assert.Equal(t, a.code(), string(generated.RspInProgress))
	assert.Assert(t, time.Since(start) < time.Second, "answered at once")

	g.Open()
	assert.Equal(t, e.read(first).code(), string(generated.RspHTTP200))
	assert.Equal(t, len(g.Arrived()), 0, "the duplicate never reached the core")
}

func TestLedgerUnknownIsNotResent(t *testing.T) {
	sim := simCore(300 * time.Millisecond)
	e := startEnv(t, envConfig{core: sim, ledger: true, timeout: 50 * time.Millisecond})
	guid := testkit.GUID()
	f := transferFrame(t, guid, memo("SLOW"))
	assert.Equal(t, e.roundTrip(f).code(), string(generated.RspReadTimeout))
	assert.Equal(t, e.roundTrip(f).code(), string(generated.RspReadTimeout))
	assert.Equal(t, sim.Stats().Calls, 1)
	assert.Equal(t, e.row(guid).State, ledger.StateUnknown)
}

// TestLedgerFailedIsResent: E902 leaves the row FAILED; the channel's resend
// re-claims it and goes to the core.
func TestLedgerFailedIsResent(t *testing.T) {
	sim := simCore(0)
	e := startEnv(t, envConfig{core: sim, ledger: true, dial: refuseFirstDial()})
	guid := testkit.GUID()
	f := transferFrame(t, guid)
	assert.Equal(t, e.roundTrip(f).code(), string(generated.RspConnectFail))
	assert.Equal(t, e.row(guid).State, ledger.StateFailed)

	assert.Equal(t, e.roundTrip(f).code(), string(generated.RspHTTP200))
	r := e.row(guid)
	assert.Equal(t, r.State, ledger.StateDone)
	assert.Equal(t, r.Attempts, 2)
	assert.Equal(t, sim.PostCount(guid), 1)
}

// brokenLedger fails as told.
type brokenLedger struct {
	claimErr, finishErr error
	finished            chan string
}

func (b *brokenLedger) Claim(ctx context.Context, r ledger.Request) (ledger.Claim, error) {
	if b.claimErr != nil {
		return ledger.Claim{}, b.claimErr
	}
	return ledger.Claim{Outcome: ledger.Owned, Attempts: 1}, nil
}

// Peek finds no row: the GUID needs a claim.
func (b *brokenLedger) Peek(ctx context.Context, r ledger.Request) (ledger.Claim, error) {
	return ledger.Claim{Outcome: ledger.NeedsClaim}, nil
}

func (b *brokenLedger) Finish(ctx context.Context, guid string, attempts int, o ledger.Outcome) error {
	b.finished <- o.RspCode
	return b.finishErr
}

// FinishLater reports the result from another goroutine, as the ledger's
// writer does, and only then signals finished.
func (b *brokenLedger) FinishLater(ctx context.Context, guid string, attempts int, o ledger.Outcome, then func(error)) error {
	go func() {
		then(b.finishErr)
		b.finished <- o.RspCode
	}()
	return nil
}

func (b *brokenLedger) AbandonClaim(ctx context.Context, guid string, attempts int, token string, o ledger.Outcome) error {
	return b.finishErr
}

func TestLedgerClaimErrorIsE902(t *testing.T) {
	core := &counting{h: simCore(0)}
	bl := &brokenLedger{claimErr: errors.New("disk I/O error"), finished: make(chan string, 1)}
	e := startEnv(t, envConfig{core: core, ledgerOverride: bl})
	assert.Equal(t, e.roundTrip(transferFrame(t, testkit.GUID())).code(), string(generated.RspConnectFail))
	assert.Equal(t, core.calls.Load(), int64(0))
	assert.Equal(t, len(bl.finished), 0)
}

func TestLedgerFinishErrorStillAnswersTheOutcome(t *testing.T) {
	bl := &brokenLedger{finishErr: errors.New("disk I/O error"), finished: make(chan string, 1)}
	e := startEnv(t, envConfig{core: simCore(0), ledgerOverride: bl})
	assert.Equal(t, e.roundTrip(transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
	assert.Equal(t, <-bl.finished, string(generated.RspHTTP200))
	e.srv.WaitRecorded() // the failure is logged before the recording counts as over
	assert.Assert(t, strings.Contains(e.log.String(), "row stays SENT"))
}

// holdWriteLock takes the ledger file's write lock from a connection of
// its own, as another process can (a batch command, sqlite3 in a shell),
// and holds it until release is called.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?_txlock=immediate&_busy_timeout=5000")
	assert.NilError(t, err)
	tx, err := db.Begin() // BEGIN IMMEDIATE: the write lock, now
	assert.NilError(t, err)
	var once sync.Once
	release = func() {
		once.Do(func() {
			tx.Rollback()
			db.Close()
		})
	}
	t.Cleanup(release)
	return release
}

// TestLedgerLockedAtClaim: another connection holds the ledger's write
// lock past the busy timeout when a frame arrives. The claim cannot commit,
// so nothing is sent and the answer is E902; once the lock is gone, a
// resend with the same GUID goes through, once.
func TestLedgerLockedAtClaim(t *testing.T) {
	sim := simCore(0)
	core := &counting{h: sim}
	e := startEnv(t, envConfig{core: core, ledger: true, ledgerOpts: []ledger.Option{ledger.WithBusyTimeout(50 * time.Millisecond)}})
	guid := testkit.GUID()
	release := holdWriteLock(t, e.led.Path())
	assert.Equal(t, e.roundTrip(transferFrame(t, guid)).code(), string(generated.RspConnectFail))
	release()
	assert.Equal(t, core.calls.Load(), int64(0))
	e.noRow(guid)
	assert.Assert(t, strings.Contains(e.log.String(), "ledger claim failed"))

	assert.Equal(t, e.roundTrip(transferFrame(t, guid)).code(), string(generated.RspHTTP200))
	assert.Equal(t, e.row(guid).State, ledger.StateDone)
	assert.Equal(t, sim.PostCount(guid), 1)
}

// answerUnderLock sends a transfer to a relay with a ledger whose busy
// timeout is busy, and once it is claimed (its row SENT) and at the core,
// takes the ledger's write lock from another connection and lets core
// answer. The caller reads the answer from c and calls release.
func answerUnderLock(t *testing.T, core http.Handler, frame func(guid string) []byte, busy time.Duration) (e *env, c net.Conn, guid string, release func()) {
	t.Helper()
	g := newGate(core)
	e = startEnv(t, envConfig{core: g, ledger: true, ledgerOpts: []ledger.Option{ledger.WithBusyTimeout(busy)}})
	guid = testkit.GUID()
	c = e.dial()
	_, err := c.Write(frame(guid))
	assert.NilError(t, err)
	g.WaitArrival(t)
	release = holdWriteLock(t, e.led.Path())
	g.Open()
	return e, c, guid, release
}

// transferOf and inquiryOf build the frame answerUnderLock sends.
func transferOf(t *testing.T) func(string) []byte {
	return func(guid string) []byte { return transferFrame(t, guid) }
}

func inquiryOf(t *testing.T) func(string) []byte {
	return func(guid string) []byte { return inquiryFrame(t, guid, "11002003004005") }
}

// TestOutcomeNotRecorded: the core answers while another connection holds
// the ledger's write lock past the busy timeout, so the outcome cannot be
// recorded and the row stays SENT for resolve --stale-sent. The channel
// gets the core's answer when settling the row will agree with it (a
// posted transfer is found by its lookup), and E901 when it would not (a
// refusal or core error is not found either: resolve would make the row
// FAILED E902 and reprocess would send the transfer again; a read has no
// lookup and is settled FAILED E902 whatever it answered).
func TestOutcomeNotRecorded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		core  http.Handler
		frame func(string) []byte
		want  generated.RspCode
	}{
		{"posted", simCore(0), transferOf(t), generated.RspHTTP200},
		{"refused", reply(422, `{"result":"INSUFFICIENT_FUNDS"}`), transferOf(t), generated.RspReadTimeout},
		{"core error", reply(500, ``), transferOf(t), generated.RspReadTimeout},
		{"read answered", simCore(0), inquiryOf(t), generated.RspReadTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, c, guid, release := answerUnderLock(t, tc.core, tc.frame, 50*time.Millisecond)
			a := e.read(c)
			e.srv.WaitRecorded() // the attempt to record the outcome is over
			release()

			assert.Equal(t, a.code(), string(tc.want))
			assert.Equal(t, e.row(guid).State, ledger.StateSent)
			assert.Assert(t, strings.Contains(e.log.String(), "outcome not recorded; row stays SENT"))
			if sim, ok := tc.core.(*coresim.Server); ok && tc.want == generated.RspHTTP200 {
				assert.Equal(t, sim.PostCount(guid), 1)
			}
		})
	}
}

// TestAnswerWaitsForTheRecordOnlyWhereItMust: the core answers while
// another connection holds the ledger's write lock (a long busy timeout,
// so the outcome's commit waits for the lock rather than failing). A 0000
// goes out at once, while the row is still SENT: resolve would settle it to
// the same answer. A refusal waits until its DONE row is on disk: resolve
// could not reproduce it. Both rows end DONE once the lock is gone.
func TestAnswerWaitsForTheRecordOnlyWhereItMust(t *testing.T) {
	for _, tc := range []struct {
		name      string
		core      http.Handler
		frame     func(string) []byte
		want      generated.RspCode
		waitsLock bool
	}{
		{"posted", simCore(0), transferOf(t), generated.RspHTTP200, false},
		{"refused", reply(422, `{"result":"INSUFFICIENT_FUNDS"}`), transferOf(t), generated.RspInsufficientFunds, true},
		{"read answered", simCore(0), inquiryOf(t), generated.RspHTTP200, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, c, guid, release := answerUnderLock(t, tc.core, tc.frame, time.Minute)
			if tc.waitsLock {
				c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
				_, err := c.Read(make([]byte, 1))
				assert.Assert(t, errors.Is(err, os.ErrDeadlineExceeded), "answered before its outcome was recorded: %v", err)
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				release()
			}
			a := e.read(c)
			assert.Equal(t, a.code(), string(tc.want))
			if !tc.waitsLock {
				r, err := e.led.Get(context.Background(), guid)
				assert.NilError(t, err)
				assert.Equal(t, r.State, ledger.StateSent, "the commit is still waiting for the lock")
				release()
			}

			r := e.row(guid) // once recorded
			assert.Equal(t, r.State, ledger.StateDone)
			assert.Equal(t, r.RspCode, string(tc.want))
			assert.DeepEqual(t, r.Response, a.raw)
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	_, err := New(Config{})
	assert.ErrorContains(t, err, "no core client")
}

// TestPrefixNotDigitsWithMoreInput: the channel has sent far more than the
// relay reads before giving up; the E102 must still reach it (no reset
// racing the answer).
func TestPrefixNotDigitsWithMoreInput(t *testing.T) {
	e := startEnv(t, envConfig{core: reply(500, ``)})
	c := e.dial()
	_, err := c.Write(append([]byte("x001"), bytes.Repeat([]byte("garbage "), 2000)...))
	assert.NilError(t, err)
	a := e.read(c)
	assert.Equal(t, a.code(), string(generated.RspBadFrame))
	expectClosed(t, c)
}
