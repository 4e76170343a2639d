package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/coresim"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

// runningRelay is the command started by startRun, serving on addr.
type runningRelay struct {
	coreURL, db, addr string
	lines             *bufio.Scanner // standard output after the listening line
	out               *io.PipeReader
	stderr            *testkit.SyncBuffer
	stop              context.CancelFunc
	exit              chan int
}

// startRun runs the command against a simulated core with a ledger in a
// temporary directory, the given flags added, and waits for its
// "relay listening on" line.
func startRun(t *testing.T, args ...string) *runningRelay {
	t.Helper()
	return startRunCore(t, coresim.New(coresim.Config{}), args...)
}

// startRunCore is startRun with core serving the core's API.
func startRunCore(t *testing.T, coreAPI http.Handler, args ...string) *runningRelay {
	t.Helper()
	core := httptest.NewServer(coreAPI)
	t.Cleanup(core.Close)
	r := &runningRelay{coreURL: core.URL, db: filepath.Join(t.TempDir(), "relay.db"), stderr: &testkit.SyncBuffer{}, exit: make(chan int, 1)}
	ctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	t.Cleanup(stop)
	outR, outW := io.Pipe()
	args = append([]string{"--port", "0", "--core", core.URL, "--db", r.db}, args...)
	go func() {
		r.exit <- run(ctx, args, outW, r.stderr)
		outW.Close()
	}()
	r.out = outR
	r.lines = bufio.NewScanner(outR)
	assert.Assert(t, r.lines.Scan(), "no listening line; stderr:\n%s", r.stderr.String())
	addr, ok := strings.CutPrefix(r.lines.Text(), "relay listening on ")
	assert.Assert(t, ok, r.lines.Text())
	r.addr = addr
	return r
}

// drain discards the rest of standard output, so the command never blocks
// writing it.
func (r *runningRelay) drain() { go io.Copy(io.Discard, r.out) }

// stopAndWait stops the command as SIGTERM would and expects exit status 0.
func (r *runningRelay) stopAndWait(t *testing.T) {
	t.Helper()
	r.stop()
	select {
	case code := <-r.exit:
		assert.Equal(t, code, 0, r.stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("relay did not stop")
	}
}

// sendTransfer sends one transfer (testkit.TransferTx) with guid, to
// another bank, and returns the answer.
func sendTransfer(t *testing.T, addr, guid string) []byte {
	t.Helper()
	frame := testkit.Transfer(t, guid, map[string]string{"wdAcct": "11002003004005", "dpBank": "004", "dpAcct": "22003004005006", "memo": "cmd test"})
	c, err := net.Dial("tcp", addr)
	assert.NilError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Write(frame)
	assert.NilError(t, err)
	answer, err := wire.ReadFrame(c, nil)
	assert.NilError(t, err)
	return answer
}
