package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/channel"
	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
)

// TestLedgerDiskFullReadOnlyAndBack: the ledger alone on a 16 MiB file
// system, through what a bad day does to its disk. A relay serves; the
// disk is filled (claims fail: E902, nothing sent) and freed (the relay
// recovers by itself); the relay is killed; the file system is remounted
// read-only (a relay started then exits 2 naming the ledger) and
// read-write again; a relay started on it serves a burst of transfers,
// every one 0000. The transfers come to several times what 16 MiB of WAL
// holds: a WAL allowed that much filled the disk by itself, and then
// nothing committed again. At the end resolve settles what the full disk
// left SENT and exits 0, every GUID the core posted is DONE/0000 and was
// posted once, no E902 was posted, the history verifies (ledger audit),
// and the relays' ERROR lines are a handful, not one per frame.
func TestLedgerDiskFullReadOnlyAndBack(t *testing.T) {
	relayBin, coresimBin := binaries(t)
	dir := testkit.MountTmpfs(t, 16<<20)
	t.Parallel()
	_, coreURL := startCore(t, coresimBin, "0")
	db := filepath.Join(dir, "relay.db")
	var book transferBook

	first := startRelay(t, relayBin, coreURL, db, "2")
	book.burst(t, first.addr, "before", 400, false)
	t.Logf("after 400 transfers: %s", diskSizes(dir))

	// Full: new claims cannot commit. A commit may still find room in the
	// WAL file a checkpoint has emptied, until the WAL needs more.
	filler := testkit.Fill(t, dir)
	full := time.Now()
	for e902 := 0; e902 == 0; {
		assert.Assert(t, time.Since(full) < 30*time.Second, "no claim failed on a full disk: %s", diskSizes(dir))
		e902 = book.burst(t, first.addr, "full", 50, true)[generated.RspConnectFail]
	}
	book.burst(t, first.addr, "full", 50, true)
	fullFor := time.Since(full)
	t.Logf("full for %v: %s", fullFor, diskSizes(dir))

	// Freed: the same relay serves again by itself.
	assert.NilError(t, os.Remove(filler))
	book.burst(t, first.addr, "freed", 200, false)
	t.Logf("freed: %s", diskSizes(dir))
	claimLines := strings.Count(first.stderr.String(), "ledger claim failed")
	assert.Assert(t, claimLines >= 1 && claimLines <= 2+int(fullFor/time.Second), "%d claim failure lines in %v full", claimLines, fullFor)

	first.signal(t, syscall.SIGKILL)
	assert.Equal(t, first.wait(t, 10*time.Second), -1)

	testkit.Remount(t, dir, "ro")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, relayBin, "--port", "0", "--core", coreURL, "--db", db, "--timeout", "2").CombinedOutput()
	var exit *exec.ExitError
	assert.Assert(t, errors.As(err, &exit), "relay on a read-only ledger: %v: %s", err, out)
	assert.Equal(t, exit.ExitCode(), 2, "%s", out)
	assert.Assert(t, strings.Contains(string(out), db), "the error names the ledger: %s", out)
	testkit.Remount(t, dir, "rw")
	t.Logf("killed, remounted: %s", diskSizes(dir))

	third := startRelay(t, relayBin, coreURL, db, "2")
	book.burst(t, third.addr, "restarted", 1500, false)
	t.Logf("after 1,500 more: %s", diskSizes(dir))

	// A 0000 whose outcome found the disk full was answered before its
	// commit (a transfer's 0000 is what settling it finds): its row is
	// SENT until resolve, which the disk must let write again.
	settleOrphans(t, db, coreURL)
	out, err = exec.Command(resolveBin(t), "--db", db, "--core", coreURL, "--min-age", "0", "--stale-sent", "1").CombinedOutput()
	assert.NilError(t, err, "resolve: %s", out)
	posted, notSent := book.split()
	t.Logf("%d posted, %d answered E902", len(posted), len(notSent))
	checkEveryGUIDPostedOnceAndDone(t, db, coreURL, posted)
	st, err := coreStats(coreURL)
	assert.NilError(t, err)
	for _, g := range notSent {
		assert.Check(t, is.Equal(st.ByGUID[g], 0), "%s was answered E902 and posted", g)
	}
	out, err = exec.Command(binPath(t, "ledger"), "audit", "--db", db).CombinedOutput()
	assert.NilError(t, err, "ledger audit: %s", out)

	third.signal(t, syscall.SIGTERM)
	assert.Equal(t, third.wait(t, 15*time.Second), 0)
	assert.Equal(t, strings.Count(third.stderr.String(), "level=ERROR"), 0, "the restarted relay on a disk with room")
	// The first relay's: the claim failures' line, and an outcome not
	// recorded for each transfer whose claim committed while the disk
	// filled.
	errLines := strings.Count(first.stderr.String(), "level=ERROR")
	t.Logf("first relay: %d ERROR lines, %d of them for failed claims, %d for outcomes not recorded", errLines, claimLines, strings.Count(first.stderr.String(), "outcome not recorded"))
	assert.Assert(t, errLines <= claimLines+book.count("full", generated.RspHTTP200), "%d ERROR lines", errLines)
}

// transferBook is every transfer a test sent and the code it was
// answered.
type transferBook struct {
	mu   sync.Mutex
	code map[string]generated.RspCode // by GUID
	seen map[string]map[generated.RspCode]int
}

// burst sends n transfers of new GUIDs to addr over eight connections, one
// frame at a time each, and returns the codes answered. Every answer must
// be 0000, or E902 where mayFail (a full disk); phase names them in book.
func (b *transferBook) burst(t *testing.T, addr, phase string, n int, mayFail bool) map[generated.RspCode]int {
	t.Helper()
	const conns = 8
	frames := make([][]byte, n)
	guids := make([]string, n)
	for i := range frames {
		guids[i] = channel.NewGUID()
		frames[i] = testkit.Transfer(t, guids[i], map[string]string{"amount": "1", "memo": "disk " + phase})
	}
	codes := make([]generated.RspCode, n)
	errs := make(chan error, conns)
	var wg sync.WaitGroup
	for c := range conns {
		wg.Go(func() {
			conn, err := channel.Dial(context.Background(), addr, 10*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			for i := c; i < n; i += conns {
				raw, err := conn.Send(frames[i])
				if err != nil {
					errs <- fmt.Errorf("%s: %w", guids[i], err)
					return
				}
				a, err := channel.Decode(raw)
				if err != nil {
					errs <- fmt.Errorf("%s: %w", guids[i], err)
					return
				}
				codes[i] = a.Code
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NilError(t, err)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if b.code == nil {
		b.code, b.seen = map[string]generated.RspCode{}, map[string]map[generated.RspCode]int{}
	}
	if b.seen[phase] == nil {
		b.seen[phase] = map[generated.RspCode]int{}
	}
	got := map[generated.RspCode]int{}
	for i, g := range guids {
		b.code[g] = codes[i]
		b.seen[phase][codes[i]]++
		got[codes[i]]++
	}
	t.Logf("%s: %d transfers: %v", phase, n, got)
	for code, k := range got {
		ok := code == generated.RspHTTP200 || (mayFail && code == generated.RspConnectFail)
		assert.Assert(t, ok, "%s: %d transfers answered %s (all: %v)", phase, k, code, got)
	}
	return got
}

// count is how many transfers of phase were answered code.
func (b *transferBook) count(phase string, code generated.RspCode) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seen[phase][code]
}

// split is the GUIDs answered 0000 and those answered E902.
func (b *transferBook) split() (posted, notSent []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for g, code := range b.code {
		if code == generated.RspHTTP200 {
			posted = append(posted, g)
		} else {
			notSent = append(notSent, g)
		}
	}
	return posted, notSent
}

// diskSizes is the sizes of the files in dir (the ledger's, and a
// filler), for the log of a test.
func diskSizes(dir string) string {
	es, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var sizes []string
	for _, e := range es {
		if fi, err := e.Info(); err == nil {
			sizes = append(sizes, fmt.Sprintf("%s %d", e.Name(), fi.Size()))
		}
	}
	return strings.Join(sizes, ", ")
}
