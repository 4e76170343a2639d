package channel_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/channel"
	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
)

// refusedAddr returns an address on which nothing listens.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func dial(t *testing.T, addr string, timeout time.Duration) *channel.Conn {
	t.Helper()
	c, err := channel.Dial(context.Background(), addr, timeout)
	assert.NilError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestSendSeveralFramesOnOneConnection(t *testing.T) {
	r := testkit.Start(t, nil)
	c := dial(t, r.Addr, time.Second)
	var sent []string
	for range 3 {
		g := channel.NewGUID()
		frame, err := channel.BuildRequest("BKTR0001", g, bktrFields, time.Now())
		assert.NilError(t, err)
		ans, err := c.Send(frame)
		assert.NilError(t, err)
		a, err := channel.Decode(ans)
		assert.NilError(t, err)
		assert.Equal(t, a.Code, generated.RspHTTP200)
		assert.Equal(t, a.Header.GUID, g)
		assert.Assert(t, a.Body != nil)
		sent = append(sent, string(frame))
	}
	assert.Equal(t, r.Conns(), 1)
	var got []string
	for _, f := range r.Frames() {
		got = append(got, string(f))
	}
	assert.DeepEqual(t, got, sent)
}

func TestSendNoAnswer(t *testing.T) {
	r := testkit.Start(t, func([]byte) []byte { return nil })
	c := dial(t, r.Addr, time.Second)
	frame, _ := channel.BuildRequest("BKTR0001", guid, bktrFields, time.Now())
	_, err := c.Send(frame)
	assert.Assert(t, errors.Is(err, channel.ErrNoAnswer), err)
	assert.ErrorContains(t, err, "connection closed before an answer")
	_, err = c.Send(frame)
	assert.Assert(t, errors.Is(err, channel.ErrBroken), err)
}

func TestSendTimeout(t *testing.T) {
	r := testkit.Start(t, func(f []byte) []byte {
		time.Sleep(150 * time.Millisecond)
		return testkit.Answer0000(f)
	})
	c := dial(t, r.Addr, 30*time.Millisecond)
	frame, _ := channel.BuildRequest("BKTR0001", guid, bktrFields, time.Now())
	t0 := time.Now()
	_, err := c.Send(frame)
	assert.Assert(t, time.Since(t0) < 140*time.Millisecond)
	assert.Assert(t, errors.Is(err, channel.ErrNoAnswer), err)
	assert.Assert(t, errors.Is(err, os.ErrDeadlineExceeded), err)
	assert.ErrorContains(t, err, "within 30ms")
}

func TestSendCutOffAndBadPrefix(t *testing.T) {
	r := testkit.Start(t, func(f []byte) []byte { return testkit.Answer0000(f)[:50] })
	c := dial(t, r.Addr, 100*time.Millisecond)
	frame, _ := channel.BuildRequest("BKTR0001", guid, bktrFields, time.Now())
	// The responder writes 50 bytes and waits for the next frame: the read
	// times out with what arrived.
	_, err := c.Send(frame)
	assert.Assert(t, errors.Is(err, channel.ErrNoAnswer), err)

	r = testkit.Start(t, func([]byte) []byte { return []byte("ABCD and more") })
	c = dial(t, r.Addr, time.Second)
	_, err = c.Send(frame)
	assert.Assert(t, errors.Is(err, channel.ErrMalformed), err)
	assert.ErrorContains(t, err, `"ABCD"`)
}

func TestDialRefused(t *testing.T) {
	_, err := channel.Dial(context.Background(), refusedAddr(t), time.Second)
	assert.ErrorContains(t, err, "cannot reach relay")
	assert.ErrorContains(t, err, "refused")
	assert.Assert(t, !strings.Contains(err.Error(), "\n"))
}

// Probe half-closes its sending side after the frame and still reads the
// answer (SPEC §1).
func TestHalfCloseStillReadsAnswer(t *testing.T) {
	r := testkit.Start(t, nil)
	frame, _ := channel.BuildRequest("BKIQ0001", guid, map[string]string{"bank": "LHB", "acct": "1"}, time.Now())
	res, err := channel.Probe(context.Background(), r.Addr, frame, time.Second)
	assert.NilError(t, err)
	assert.Equal(t, len(res.Frames), 1)
	assert.NilError(t, res.End)
	a, err := channel.Decode(res.Frames[0])
	assert.NilError(t, err)
	assert.Equal(t, a.Code, generated.RspHTTP200)
}
