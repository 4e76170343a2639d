package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

func TestBadArgs(t *testing.T) {
	for _, args := range [][]string{{"--relay", "9200"}, {"--timeout", "0"}, {"--log-level", "x"}, {"extra"}} {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, run(context.Background(), args, &stdout, &stderr), 2, "%v", args)
		assert.Equal(t, strings.Count(stderr.String(), "\n"), 1, stderr.String())
	}
}

func TestDefaults(t *testing.T) {
	o, err := parseArgs(nil, io.Discard)
	assert.NilError(t, err)
	assert.Equal(t, o.relayAddr, "127.0.0.1:9200")
	assert.Equal(t, o.coreAddr, "127.0.0.1:9201")
}

// TestSandbox starts both servers on free ports, sends a transfer through
// the relay, and stops with the context as Ctrl-C would.
func TestSandbox(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	outR, outW := io.Pipe()
	var stderr testkit.SyncBuffer
	exit := make(chan int, 1)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the default ledger's directory goes here
	go func() {
		exit <- run(ctx, []string{"--relay", "127.0.0.1:0", "--core-listen", "127.0.0.1:0"}, outW, &stderr)
		outW.Close()
	}()
	lines := bufio.NewScanner(outR)
	var relayAddr string
	var printed []string
	for lines.Scan() {
		printed = append(printed, lines.Text())
		if rest, ok := strings.CutPrefix(lines.Text(), "relay listening on "); ok {
			relayAddr, _, _ = strings.Cut(rest, " ")
		}
		if strings.Contains(lines.Text(), "ledger stats --db ") {
			break
		}
	}
	assert.Assert(t, relayAddr != "", "printed %q; stderr:\n%s", printed, stderr.String())
	all := strings.Join(printed, "\n")
	assert.Assert(t, strings.Contains(all, "go run ./cmd/lhsend --addr "+relayAddr+" --tx "), all)
	// It says how to inspect its ledger, and that the default one goes.
	assert.Assert(t, strings.Contains(all, "ledger stats --db "+tmp), all)
	assert.Assert(t, strings.Contains(all, "removed at exit: give --db to keep it"), all)
	go io.Copy(io.Discard, outR)

	h := generated.Header{TxCode: "BKTR0001", GUID: "000000000000000000000000005a4db0", Flag: generated.FlagRequest, SrcOrg: "081", DstOrg: "999", SentAt: "20261129103000"}
	frame, err := generated.AppendFrame(nil, &h, &generated.BKTR0001Request{WdBank: "081", WdAcct: "11002003004005", DpBank: "004", DpAcct: "22003004005006", Amount: 1000, Memo: "sandbox"})
	assert.NilError(t, err)
	c, err := net.Dial("tcp", relayAddr)
	assert.NilError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for range 2 { // the second is a replay from the ledger
		_, err = c.Write(frame)
		assert.NilError(t, err)
		answer, err := wire.ReadFrame(c, nil)
		assert.NilError(t, err)
		assert.Equal(t, generated.RawHeader(answer).RspCode, string(generated.RspHTTP200))
	}

	stop()
	select {
	case code := <-exit:
		assert.Equal(t, code, 0, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("sandbox did not stop")
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "lhrelay-sandbox-*"))
	assert.Equal(t, len(left), 0, "temporary ledger removed")
}
