package relay

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
)

// dialFrom opens a channel connection from a given loopback address
// (127.0.0.2 is a second "host" on the same machine).
func (e *env) dialFrom(local string) net.Conn {
	e.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.Dial("tcp", e.addr)
	assert.NilError(e.t, err)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	e.t.Cleanup(func() { c.Close() })
	return c
}

// TestSilentConnectionClosed: a new connection that sends nothing, or never
// starts its TLS handshake, is closed after the shorter of FrameTimeout and
// IdleTimeout (SPEC 5.7): it holds its slot for neither the hour of the
// other, and the wait for the first frame is idle time too.
func TestSilentConnectionClosed(t *testing.T) {
	for _, tc := range []struct {
		name               string
		frameTimeout, idle time.Duration
	}{
		{"frame-timeout shorter", 200 * time.Millisecond, time.Hour},
		{"idle-timeout shorter", time.Hour, 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startEnv(t, envConfig{core: simCore(0), frameTimeout: tc.frameTimeout, idleTimeout: tc.idle})
			logged := e.log.When("no frame started in time after connecting")
			c := e.dial()
			expectClosed(t, c) // within dial's 10 s deadline, so long before the hour
			waitFor(t, logged, "the log line")
		})
		t.Run(tc.name+", TLS", func(t *testing.T) {
			ca := testkit.NewCA(t, "relay CA")
			e := startEnv(t, envConfig{core: simCore(0), frameTimeout: tc.frameTimeout, idleTimeout: tc.idle, tls: channelTLS(t, ca, ca)})
			logged := e.log.When("TLS handshake failed")
			c := e.dial()
			expectClosed(t, c)
			waitFor(t, logged, "the log line")
		})
	}
}

// TestPerAddrShare: a flood of silent connections from one address takes
// at most its share of MaxConns; a channel from another address is still
// served, and the relay, which still has room, stays ready.
func TestPerAddrShare(t *testing.T) {
	e := startEnv(t, envConfig{core: simCore(0), ledger: true, maxConns: 8, idleTimeout: time.Hour, frameTimeout: time.Hour})
	assert.Equal(t, e.srv.MaxConnsPerAddr(), 4, "half of MaxConns by default")
	var flood []net.Conn
	for range 8 {
		flood = append(flood, e.dialFrom("127.0.0.1"))
	}
	// The first four were admitted, in order; the other four are closed
	// unread.
	for _, c := range flood[4:] {
		expectClosed(t, c)
	}
	assert.Equal(t, e.srv.OverShare(), int64(4))
	assert.Equal(t, e.srv.Rejected(), int64(0))

	other := e.dialFrom("127.0.0.2")
	assert.Equal(t, e.send(other, transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
	assert.NilError(t, e.srv.Ready(context.Background()))
	assert.Assert(t, strings.Contains(e.log.String(), "holds its share of max-conns"))
}

// TestReadyWhileFull: while MaxConns refuses connections, Ready says so.
func TestReadyWhileFull(t *testing.T) {
	gone := make(chan struct{}, 4)
	e := startEnv(t, envConfig{core: simCore(0), maxConns: 2, maxPerAddr: 2, noRoomFor: time.Nanosecond, connDone: func() { gone <- struct{}{} }})
	c1, c2 := e.dial(), e.dial()
	assert.Equal(t, e.send(c1, transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
	assert.Equal(t, e.send(c2, transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
	expectClosed(t, e.dialFrom("127.0.0.2"))
	assert.ErrorIs(t, e.srv.Ready(context.Background()), ErrNoRoom)

	c1.Close()
	<-gone
	assert.NilError(t, e.srv.Ready(context.Background()))
}

// TestPerAddrShareValidation: a negative share is refused; one at least
// MaxConns turns the share off.
func TestPerAddrShareValidation(t *testing.T) {
	e := startEnv(t, envConfig{core: simCore(0), maxConns: 3, maxPerAddr: 3})
	assert.Equal(t, e.srv.MaxConnsPerAddr(), 3)
	_, err := New(Config{Core: e.srv.core, MaxConnsPerAddr: -1})
	assert.ErrorContains(t, err, "negative")
}

// waitFor waits for ch to close, failing the test after 10 s.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not come", what)
	}
}

// TestHandshakeFailuresRateLimited: junk connections to a TLS relay are
// each counted but logged at most once a second, not once each.
func TestHandshakeFailuresRateLimited(t *testing.T) {
	ca := testkit.NewCA(t, "relay CA")
	e := startEnv(t, envConfig{core: simCore(0), tls: channelTLS(t, ca, ca)})
	const junk = 30
	start := time.Now()
	for range junk {
		c := e.dial()
		c.Write([]byte("0076 not a TLS client hello"))
		expectClosed(t, c) // the relay counts and logs before it closes
	}
	elapsed := time.Since(start)
	assert.Equal(t, e.srv.handshakeFailed.Load(), int64(junk))
	lines := strings.Count(e.log.String(), "TLS handshake failed")
	assert.Assert(t, lines >= 1 && lines <= 1+int(elapsed/time.Second), "%d lines for %d failures in %v", lines, junk, elapsed)
}
