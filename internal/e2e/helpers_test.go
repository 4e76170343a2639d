package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/channel"
	"lhrelay/internal/coresim"
	"lhrelay/internal/ledger"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/testkit"
)

// buildFlags are passed to go build (race_test.go adds -race).
var buildFlags []string

// The two builds the tests run: checked, with buildFlags (the race
// detector under -race), for every test of behaviour; shipped, without,
// for the tests that assert on timing (overload_test.go), where the race
// detector's slowdown of the relay's own work would read as the core's
// latency.
var checked, shipped build

func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	checked.remove()
	shipped.remove()
	os.Exit(code)
}

// build is one go build of the commands the tests run, done once per test
// run into a directory of its own.
type build struct {
	once sync.Once
	dir  string
	err  error
}

func (b *build) run(t testing.TB, flags []string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the relay and coresim binaries; skipped with -short")
	}
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp("", "lhrelay-e2e-")
		if b.err != nil {
			return
		}
		args := append([]string{"build"}, flags...)
		args = append(args, "-o", b.dir+string(filepath.Separator), "lhrelay/cmd/relay", "lhrelay/cmd/coresim", "lhrelay/cmd/resolve", "lhrelay/cmd/reprocess", "lhrelay/cmd/ledger", "lhrelay/cmd/lhsend")
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	assert.NilError(t, b.err)
	return b.dir
}

func (b *build) remove() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// binaries builds cmd/relay, cmd/coresim, cmd/resolve, cmd/reprocess,
// cmd/ledger and cmd/lhsend once per test run (with buildFlags) and returns the first
// two's paths (binPath gives the others). It skips the test in -short
// mode.
func binaries(t testing.TB) (relayBin, coresimBin string) {
	t.Helper()
	dir := checked.run(t, buildFlags)
	return filepath.Join(dir, "relay"), filepath.Join(dir, "coresim")
}

// shippedBinaries is binaries built as they ship, without buildFlags.
func shippedBinaries(t testing.TB) (relayBin, coresimBin string) {
	t.Helper()
	dir := shipped.run(t, nil)
	return filepath.Join(dir, "relay"), filepath.Join(dir, "coresim")
}

// proc is a running binary.
type proc struct {
	name   string
	cmd    *exec.Cmd
	addr   string              // from its "… listening on ADDR" line
	stderr *testkit.SyncBuffer // its log
	exited chan struct{}
}

// startProc starts bin and waits (up to 10 s) for the line on standard
// output that starts with ready; the rest of that line is the address. The
// process is killed at the end of the test if still running, and its log is
// printed if the test failed.
func startProc(t testing.TB, name, bin, ready string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), stderr: &testkit.SyncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stderr = p.stderr
	stdout, err := p.cmd.StdoutPipe()
	assert.NilError(t, err)
	assert.NilError(t, p.cmd.Start())

	addr := make(chan string, 1)
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), ready); ok {
				select {
				case addr <- rest:
				default:
				}
			}
		}
		io.Copy(io.Discard, stdout)
		p.cmd.Wait() // after the last read of stdout, as exec requires
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", p.name, p.stderr)
		}
	})

	select {
	case p.addr = <-addr:
	case <-p.exited:
		t.Fatalf("%s exited before listening: %v\n%s", name, p.cmd.ProcessState, p.stderr)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not print %q within 10s\n%s", name, ready, p.stderr)
	}
	return p
}

// signal sends sig to the process.
func (p *proc) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	assert.NilError(t, p.cmd.Process.Signal(sig))
}

// wait waits for the process to exit and returns its exit status (-1 when
// killed by a signal).
func (p *proc) wait(t testing.TB, within time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("%s still running after %v", p.name, within)
		return 0
	}
}

// startCore runs coresim on a free port with the given SLOW delay and
// returns it with its base URL.
func startCore(t testing.TB, coresimBin, delay string) (*proc, string) {
	t.Helper()
	p := startProc(t, "coresim", coresimBin, "coresim listening on ", "--port", "0", "--delay", delay)
	return p, p.addr // the address is printed as http://host:port
}

// startRelay runs the relay on a free port against coreURL and the ledger
// file db.
func startRelay(t *testing.T, relayBin, coreURL, db, timeout string) *proc {
	t.Helper()
	return startProc(t, "relay", relayBin, "relay listening on ",
		"--port", "0", "--core", coreURL, "--db", db, "--timeout", timeout)
}

// transfer builds a request frame of testkit.TransferTx with memo (a memo
// starting with SLOW makes the core wait).
func transfer(t *testing.T, guid, memo string) []byte {
	t.Helper()
	return testkit.Transfer(t, guid, map[string]string{"memo": memo})
}

// sendResult is the outcome of one channel.Conn.Send.
type sendResult struct {
	raw []byte
	err error
}

// sendAsync dials the relay and sends frame on its own goroutine; the
// result arrives on the returned channel. The dial happens here, so a relay
// that is not there fails the test at once.
func sendAsync(t *testing.T, addr string, frame []byte, timeout time.Duration) <-chan sendResult {
	t.Helper()
	c, err := channel.Dial(context.Background(), addr, timeout)
	assert.NilError(t, err)
	t.Cleanup(func() { c.Close() })
	out := make(chan sendResult, 1)
	go func() {
		raw, err := c.Send(frame)
		out <- sendResult{raw, err}
	}()
	return out
}

// send sends frame on a new connection and decodes the answer.
func send(t *testing.T, addr string, frame []byte) channel.Answer {
	t.Helper()
	r := <-sendAsync(t, addr, frame, 10*time.Second)
	assert.NilError(t, r.err)
	a, err := channel.Decode(r.raw)
	assert.NilError(t, err)
	return a
}

// sendRaw sends frame on a new connection and returns the answer's bytes.
func sendRaw(t *testing.T, addr string, frame []byte) []byte {
	t.Helper()
	r := <-sendAsync(t, addr, frame, 10*time.Second)
	assert.NilError(t, r.err)
	return r.raw
}

// poll calls cond every few milliseconds until it reports true, or fails
// the test after within. Polling an observable, not sleeping for a guess.
func poll(t *testing.T, within time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s (last error: %v)", within, what, err)
		}
		<-tick.C
	}
}

// coreStats reads GET /_stats.
func coreStats(coreURL string) (coresim.Stats, error) {
	var st coresim.Stats
	resp, err := http.Get(coreURL + "/_stats")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET /_stats: HTTP %d", resp.StatusCode)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// postsFor returns the core's count of POST /v1/transfers for guid.
func postsFor(t *testing.T, coreURL, guid string) int {
	t.Helper()
	st, err := coreStats(coreURL)
	assert.NilError(t, err)
	return st.ByGUID[guid]
}

// waitReceived waits until the core has received a POST for guid.
func waitReceived(t *testing.T, coreURL, guid string) {
	t.Helper()
	poll(t, 10*time.Second, "the core to receive the POST of "+guid, func() (bool, error) {
		st, err := coreStats(coreURL)
		return err == nil && st.ByGUID[guid] > 0, err
	})
}

// waitPosted waits until GET /v1/transfers/{guid} answers 200: the core has
// posted the transfer.
func waitPosted(t *testing.T, coreURL, guid string) {
	t.Helper()
	poll(t, 10*time.Second, "the core to post "+guid, func() (bool, error) {
		resp, err := http.Get(coreURL + "/v1/transfers/" + guid)
		if err != nil {
			return false, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("HTTP %d", resp.StatusCode)
	})
}

// row reads a ledger row through its own short-lived handle, as an
// operator's tool would, while a relay process may have the file open.
func row(t *testing.T, db, guid string) ledger.Row {
	t.Helper()
	l, err := ledger.OpenExisting(db)
	assert.NilError(t, err)
	defer l.Close()
	r, err := l.Get(context.Background(), guid)
	assert.NilError(t, err)
	return r
}

// ageRow sets a row's updated_at back by age with a raw UPDATE on the
// ledger (tests only): this beats waiting for a row to become stale.
func ageRow(t *testing.T, db, guid string, state ledger.State, age time.Duration) {
	t.Helper()
	raw := testkit.OpenRaw(t, db, ledger.IsURL(db))
	n := raw.Exec(`UPDATE tx SET updated_at = ? WHERE guid = ? AND state = ?`, raw.Time(time.Now().Add(-age)), guid, string(state))
	assert.Equal(t, n, int64(1), "row %s not in state %s", guid, state)
}

// resolveBin is the path of the resolve binary that binaries built.
func resolveBin(t *testing.T) string { return binPath(t, "resolve") }

// binPath is the path of a binary that binaries built.
func binPath(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(checked.run(t, buildFlags), name)
}

// shippedPath is binPath for the build without buildFlags.
func shippedPath(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(shipped.run(t, nil), name)
}
