package corecall

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"gotest.tools/v3/assert"
)

// sinkConn is a net.Conn whose writes always succeed and are counted.
type sinkConn struct {
	net.Conn
	got    atomic.Int64
	closed atomic.Bool
}

func (s *sinkConn) Write(p []byte) (int, error) { s.got.Add(int64(len(p))); return len(p), nil }
func (s *sinkConn) Close() error                { s.closed.Store(true); return nil }

func TestSealNothingWritten(t *testing.T) {
	sink := &sinkConn{}
	c := &countingConn{Conn: sink}
	c.Write([]byte("earlier request"))
	mark := c.mark()
	assert.Assert(t, c.sealNothingWritten(mark))
	assert.Assert(t, sink.closed.Load(), "a sealed connection is closed")
	n, err := c.Write([]byte("late"))
	assert.Equal(t, n, 0)
	assert.ErrorIs(t, err, errSealed)
	assert.Equal(t, sink.got.Load(), int64(len("earlier request")))
}

func TestSealSomethingWritten(t *testing.T) {
	c := &countingConn{Conn: &sinkConn{}}
	mark := c.mark()
	c.Write([]byte("P"))
	assert.Assert(t, !c.sealNothingWritten(mark))
}

// TestSealRace checks the handshake the E902 guarantee rests on: whenever
// seal says nothing was written, the underlying connection received nothing,
// however a concurrent write interleaves.
func TestSealRace(t *testing.T) {
	for range 2000 {
		sink := &sinkConn{}
		c := &countingConn{Conn: sink}
		mark := c.mark()
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c.Write([]byte("POST /v1/transfers"))
		}()
		close(start)
		nothing := c.sealNothingWritten(mark)
		wg.Wait()
		if nothing {
			assert.Equal(t, sink.got.Load(), int64(0), "seal said nothing written")
		}
	}
}
