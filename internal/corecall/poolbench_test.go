package corecall

import (
	"net"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// BenchmarkPoolCycle is one put and get of an idle plain TCP connection:
// what the pool costs a call beyond the exchange itself, with the peek
// and with a watcher goroutine.
func BenchmarkPoolCycle(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(b, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for _, mode := range []string{"peek", "watcher"} {
		b.Run(mode, func(b *testing.B) {
			conn, err := net.Dial("tcp", ln.Addr().String())
			assert.NilError(b, err)
			pc := newPconn(&countingConn{Conn: conn})
			if mode == "watcher" {
				pc.peek, pc.watched = nil, make(chan bool, 1)
			}
			p := &pool{max: 1, idleTimeout: time.Minute}
			defer p.closeIdle()
			b.ReportAllocs()
			for b.Loop() {
				p.put(pc)
				if p.get(time.Now().Add(time.Minute)) != pc {
					b.Fatal("the connection was not reused")
				}
			}
		})
	}
}
