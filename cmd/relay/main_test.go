package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

func TestParseArgsErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--timeout", "abc"}, "invalid value"},
		{[]string{"--timeout", "0"}, `invalid value "0" for flag -timeout: "0": want more than 0 seconds`},
		{[]string{"--timeout", "-1"}, "negative duration"},
		{[]string{"--frame-timeout", "0"}, `invalid value "0" for flag -frame-timeout: "0": want more than 0 seconds`},
		{[]string{"--max-conns", "0"}, "--max-conns 0"},
		{[]string{"--port", "70000"}, "--port 70000"},
		{[]string{"--listen", "127.0.0.1:9", "--port", "9"}, "use one"},
		{[]string{"--core", "127.0.0.1:9201"}, "--core"},
		{[]string{"--log-format", "xml"}, "--log-format"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"--db", ""}, "--db"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"--nope"}, "not defined"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tc.args, &stdout, &stderr)
			assert.Equal(t, code, 2)
			assert.Assert(t, strings.HasPrefix(stderr.String(), "relay: "), stderr.String())
			assert.Assert(t, strings.Contains(stderr.String(), tc.want), stderr.String())
			assert.Equal(t, strings.Count(stderr.String(), "\n"), 1, "one line")
		})
	}
}

func TestParseArgsDefaults(t *testing.T) {
	o, err := parseArgs(nil, io.Discard)
	assert.NilError(t, err)
	assert.Equal(t, o.addr, "127.0.0.1:9200")
	assert.Equal(t, o.core, "http://127.0.0.1:9201")
	assert.Equal(t, o.db, "relay.db")
	assert.Equal(t, o.frameTimeout, 10*time.Second)
	assert.Equal(t, o.idleTimeout, 300*time.Second)

	o, err = parseArgs([]string{"--timeout", "0.5", "--connect-timeout", "250ms", "--listen", "0.0.0.0:7000"}, io.Discard)
	assert.NilError(t, err)
	assert.Equal(t, o.timeout, 500*time.Millisecond)
	assert.Equal(t, o.connectTimeout, 250*time.Millisecond)
	assert.Equal(t, o.addr, "0.0.0.0:7000")
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, run(context.Background(), []string{"--help"}, &stdout, &stderr), 0)
	for _, want := range []string{"--timeout", "(default 5)", "--frame-timeout", "(default 10)", "--idle-timeout", "(default 300)", "--max-conns", "relay.db", "--connect-timeout"} {
		assert.Assert(t, strings.Contains(stdout.String(), strings.TrimPrefix(want, "-")), "missing %q in\n%s", want, stdout.String())
	}
}

// A resource a setting names that cannot be used at start is a bad
// setting: exit 2, one line naming the flag.
func TestUnusableResourceAtStartIsExit2(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer taken.Close()
	port := strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--port", "0", "--db", filepath.Join(t.TempDir(), "missing-dir", "relay.db")}, "relay: --db: "},
		{[]string{"--port", port, "--db", filepath.Join(t.TempDir(), "relay.db")}, "relay: --listen 127.0.0.1 --port " + port + ": "},
		{[]string{"--port", "0", "--db", "postgres://u@127.0.0.1:1/x?connect_timeout=1"}, "relay: --db: "},
		{[]string{"--timeout", "5", "--connect-timeout", "9"}, "relay: --connect-timeout 9s: longer than --timeout 5s"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		assert.Equal(t, code, 2, tc.args)
		assert.Assert(t, strings.HasPrefix(stderr.String(), tc.want), stderr.String())
		assert.Equal(t, strings.Count(stderr.String(), "\n"), 1, stderr.String())
	}
}

// TestRunServesAndStops runs the command against a simulated core, sends a
// transfer, and stops it as SIGTERM would.
func TestRunServesAndStops(t *testing.T) {
	r := startRun(t, "--timeout", "1", "--log-format", "json")
	r.drain()

	guid := "00000000000000000000000000c0ffee"
	answer := sendTransfer(t, r.addr, guid)
	assert.Equal(t, string(generated.RawHeader(answer).RspCode), string(generated.RspHTTP200))

	r.stopAndWait(t)
	assert.Assert(t, strings.Contains(r.stderr.String(), `"msg":"relay stopped"`), r.stderr.String())

	led, err := ledger.OpenExisting(r.db)
	assert.NilError(t, err)
	defer led.Close()
	row, err := led.Get(context.Background(), guid)
	assert.NilError(t, err)
	assert.Equal(t, row.State, ledger.StateDone)
	assert.DeepEqual(t, row.Response, answer)
}

// TestDefaultGC: the relay's GC target is gcPercent unless GOGC is set.
func TestDefaultGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	defaultGC(func(string) string { return "" })
	assert.Equal(t, debug.SetGCPercent(100), gcPercent)
	defaultGC(func(k string) string {
		if k == "GOGC" {
			return "150"
		}
		return ""
	})
	assert.Equal(t, debug.SetGCPercent(100), 100, "an operator's GOGC is left alone")
}
