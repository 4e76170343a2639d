package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/testkit"
)

func TestBadArguments(t *testing.T) {
	dir := t.TempDir()
	badAccounts := filepath.Join(dir, "bad.csv")
	assert.NilError(t, os.WriteFile(badAccounts, []byte("bank,acct,balance\nLHB,123,1\n"), 0o644))

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--bogus"}, "flag provided but not defined: -bogus"},
		{"positional", []string{"extra"}, `unexpected argument "extra"`},
		{"negative delay", []string{"--delay", "-1"}, "negative"},
		{"nan delay", []string{"--delay", "NaN"}, `invalid value "NaN" for flag -delay`},
		{"empty delay", []string{"--delay", ""}, "empty"},
		{"port range", []string{"--port", "70000"}, "--port 70000"},
		{"port not a number", []string{"--port", "x"}, `invalid value "x" for flag -port`},
		{"limit zero", []string{"--limit", "0"}, "--limit 0"},
		{"refuse without a bound", []string{"--refuse-beyond"}, "--refuse-beyond needs --max-concurrent"},
		{"two ports", []string{"--listen", "127.0.0.1:1", "--port", "2"}, "use one"},
		{"bad listen port", []string{"--listen", "127.0.0.1:x"}, "bad port"},
		{"missing accounts", []string{"--accounts", filepath.Join(dir, "none.csv")}, "--accounts: open"},
		{"bad accounts", []string{"--accounts", badAccounts}, "bad.csv: accounts: line 2: acct"},
		{"bad log", []string{"--log", filepath.Join(dir, "no", "such", "dir.log")}, "--log: open"},
		{"bad truth", []string{"--truth", filepath.Join(dir, "no", "such", "truth.jsonl")}, "--truth: open"},
		{"control not loopback", []string{"--control", "0.0.0.0:0"}, "want a loopback address"},
		{"control not host:port", []string{"--control", "127.0.0.1"}, "--control"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), tc.args, &stdout, &stderr)
			assert.Equal(t, code, 2)
			assert.Check(t, is.Contains(stderr.String(), tc.want))
			assert.Check(t, strings.HasPrefix(stderr.String(), "coresim: "), stderr.String())
			assert.Check(t, is.Equal(strings.Count(stderr.String(), "\n"), 1), "one line: %q", stderr.String())
			assert.Check(t, is.Equal(stdout.String(), ""))
		})
	}
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, run(t.Context(), []string{"--help"}, &stdout, &stderr), 0)
	assert.Check(t, is.Contains(stdout.String(), "usage: coresim"))
	assert.Check(t, is.Contains(stdout.String(), "-delay seconds"))
	assert.Check(t, is.Contains(stdout.String(), "(default 3)"))
}

// TestServeAndStop runs the command for real: it listens on a free port,
// serves a SLOW transfer from a custom accounts file, logs it, and stops
// cleanly when its context ends, letting the transfer in flight finish.
func TestServeAndStop(t *testing.T) {
	dir := t.TempDir()
	accounts := filepath.Join(dir, "accounts.csv")
	logPath := filepath.Join(dir, "requests.log")
	assert.NilError(t, os.WriteFile(accounts, []byte("# test\nbank,acct,balance\nLHB,00000000000001,500\n"), 0o644))

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdoutR, stdoutW := io.Pipe()
	var stderr testkit.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--port", "0", "--delay", "0.2", "--accounts", accounts, "--log", logPath}, stdoutW, &stderr)
		stdoutW.Close()
	}()

	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	assert.NilError(t, err, "stderr: %s", stderr.String())
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "coresim listening on ")
	assert.Assert(t, ok, line)
	go io.Copy(io.Discard, stdoutR)

	resp, err := http.Get(base + "/v1/accounts/LHB/00000000000001")
	assert.NilError(t, err)
	resp.Body.Close()
	assert.Equal(t, resp.StatusCode, http.StatusOK)

	// Start a SLOW transfer, then ask the command to stop while it waits.
	const g = "0123456789abcdef0123456789abcdef"
	slow := make(chan int, 1)
	go func() {
		body := `{"guid":"` + g + `","wdBank":"LHB","wdAcct":"00000000000001","dpBank":"KBK","dpAcct":"1","amount":100,"memo":"SLOW"}`
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/transfers", strings.NewReader(body))
		req.Header.Set("X-GUID", g)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			slow <- -1
			return
		}
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	// Once the core has counted the call, the POST is in its handler.
	waitFor(t, func() bool {
		resp, err := http.Get(base + "/_stats")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.HasPrefix(string(b), `{"calls":1,`)
	})
	cancel()

	select {
	case code := <-done:
		assert.Equal(t, code, 0, "stderr: %s", stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("coresim did not stop")
	}
	assert.Equal(t, <-slow, http.StatusOK, "the transfer in flight finished before exit")

	log := readFile(t, logPath)
	assert.Check(t, is.Contains(log, " GET /v1/accounts/LHB/00000000000001 - 200 "))
	assert.Check(t, is.Contains(log, " POST /v1/transfers "+g+" 200 "))
	assert.Check(t, is.Contains(stderr.String(), "coresim started"))
	assert.Check(t, is.Contains(stderr.String(), "delay=0.2s"))
	assert.Check(t, is.Contains(stderr.String(), "accounts=1"))
	assert.Check(t, is.Contains(stderr.String(), "coresim stopped"))
}

// An address it cannot listen on is a bad setting: exit 2 naming it.
func TestListenFails(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"--listen", "256.0.0.1"}, &stdout, &stderr)
	assert.Equal(t, code, 2)
	assert.Check(t, is.Contains(stderr.String(), "coresim: --listen/--port 256.0.0.1:9201: listen tcp"))
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return ""
	}
	assert.NilError(t, err)
	return string(b)
}

// TestControlRefuses: with --control, POST /refuse closes the core's
// listener (a new connection is refused) and opens it again on the same
// address; /arm reaches the running core; --truth records the transfer.
func TestControlRefuses(t *testing.T) {
	truth := filepath.Join(t.TempDir(), "truth.jsonl")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdoutR, stdoutW := io.Pipe()
	var stderr testkit.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--port", "0", "--control", "127.0.0.1:0", "--truth", truth}, stdoutW, &stderr)
		stdoutW.Close()
	}()
	r := bufio.NewReader(stdoutR)
	line, err := r.ReadString('\n')
	assert.NilError(t, err, "stderr: %s", stderr.String())
	ctl, ok := strings.CutPrefix(strings.TrimSpace(line), "coresim control on ")
	assert.Assert(t, ok, line)
	line, err = r.ReadString('\n')
	assert.NilError(t, err)
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "coresim listening on ")
	assert.Assert(t, ok, line)
	go io.Copy(io.Discard, stdoutR)

	resp, err := http.Post(ctl+"/refuse?for=300ms", "", nil)
	assert.NilError(t, err)
	resp.Body.Close()
	assert.Equal(t, resp.StatusCode, http.StatusNoContent)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	_, err = c.Get(base + "/_stats")
	assert.ErrorContains(t, err, "connection refused")
	waitFor(t, func() bool {
		resp, err := c.Get(base + "/_stats")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})

	resp, err = http.Post(ctl+"/arm?fault=500", "", nil)
	assert.NilError(t, err)
	resp.Body.Close()
	const g = "0123456789abcdef0123456789abcdef"
	body := `{"guid":"` + g + `","wdBank":"LHB","wdAcct":"11002003004005","dpBank":"KBK","dpAcct":"1","amount":100,"memo":""}`
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/transfers", strings.NewReader(body))
	req.Header.Set("X-GUID", g)
	resp, err = c.Do(req)
	assert.NilError(t, err)
	resp.Body.Close()
	assert.Equal(t, resp.StatusCode, http.StatusInternalServerError)

	cancel()
	select {
	case code := <-done:
		assert.Equal(t, code, 0, "stderr: %s", stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("coresim did not stop")
	}
	assert.Check(t, is.Contains(readFile(t, truth), `"ev":"arrive","guid":"`+g+`","fault":"500"`))
}
