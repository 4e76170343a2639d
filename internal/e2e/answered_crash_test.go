package e2e

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/channel"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

// TestCrashRightAfterAnswers: a 0000 goes out while its DONE commit is on
// the way, so a relay killed (SIGKILL) just after answering may leave the
// rows of transfers it answered SENT. 32 channels send transfers back to
// back and the relay is killed as the 300th answer arrives. Every answered
// transfer must then be DONE with the very answer the channel got, or
// SENT; resolve --stale-sent settles every SENT row to DONE 0000 by
// inquiry; and the core posted each transfer exactly once.
func TestCrashRightAfterAnswers(t *testing.T) {
	relayBin, coresimBin := binaries(t)
	t.Parallel()
	_, coreURL := startCore(t, coresimBin, "0")
	db := filepath.Join(t.TempDir(), "relay.db")
	// The limit stays at --max-inflight (256, above the 32 channels): left
	// to adapt, it falls when a loaded machine slows the core's answers and
	// sheds frames E902, nothing sent, which is not what this test is about.
	relay := startProc(t, "relay", relayBin, "relay listening on ",
		"--port", "0", "--core", coreURL, "--db", db, "--timeout", "5", "--fixed-inflight")

	const channels, killAt = 32, 300
	var (
		mu       sync.Mutex
		answered = map[string][]byte{} // GUID → the answer the channel got
		sent     []string              // every GUID sent, answered or not
		wg       sync.WaitGroup
	)
	enough := make(chan struct{})
	var once sync.Once
	for range channels {
		c, err := channel.Dial(context.Background(), relay.addr, 10*time.Second)
		assert.NilError(t, err)
		t.Cleanup(func() { c.Close() })
		// Built here: a failing assertion must not run on another
		// goroutine. killAt each, in case one channel gets every answer.
		guids := make([]string, killAt)
		frames := make([][]byte, killAt)
		for i := range guids {
			guids[i] = channel.NewGUID()
			frames[i] = transfer(t, guids[i], "answered then killed")
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, guid := range guids {
				mu.Lock()
				sent = append(sent, guid)
				mu.Unlock()
				raw, err := c.Send(frames[i])
				if err != nil {
					return // the relay is gone
				}
				mu.Lock()
				answered[guid] = raw
				if len(answered) >= killAt {
					once.Do(func() { close(enough) })
				}
				mu.Unlock()
			}
		}()
	}
	select {
	case <-enough:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not answer enough transfers")
	}
	relay.signal(t, syscall.SIGKILL)
	assert.Equal(t, relay.wait(t, 10*time.Second), -1, "killed by the signal")
	wg.Wait()

	led, err := ledger.OpenExisting(db)
	assert.NilError(t, err)
	var stale []string // answered, but the DONE never landed
	for guid, raw := range answered {
		a, err := channel.Decode(raw)
		assert.NilError(t, err)
		assert.Equal(t, a.Code, generated.RspHTTP200, guid)
		r, err := led.Get(context.Background(), guid)
		assert.NilError(t, err, guid)
		switch r.State {
		case ledger.StateDone:
			assert.Assert(t, bytes.Equal(r.Response, raw), "%s: the stored answer is not the one sent", guid)
		case ledger.StateSent:
			stale = append(stale, guid)
		default:
			t.Errorf("%s: answered 0000, row %s", guid, r.State)
		}
	}
	assert.NilError(t, led.Close())
	t.Logf("%d transfers answered before the kill; %d of their rows still SENT", len(answered), len(stale))

	// Settle the SENT rows as an operator would: resolve --stale-sent.
	for _, guid := range stale {
		waitPosted(t, coreURL, guid)
		ageRow(t, db, guid, ledger.StateSent, time.Minute)
	}
	out, err := exec.Command(resolveBin(t), "--db", db, "--core", coreURL, "--min-age", "60", "--stale-sent", "1").Output()
	assert.NilError(t, err, "resolve: %s", out)
	assert.Assert(t, strings.Contains(string(out), " unreachable=0 "), string(out))

	// Every row now agrees with the core. An answered transfer is DONE
	// 0000 and was posted once. One the kill left unanswered was posted at
	// most once; resolve made its row DONE if the core has it and FAILED
	// if not, or left it SENT if it is younger than --stale-sent; a claim
	// the kill beat has no row and no post.
	st, err := coreStats(coreURL)
	assert.NilError(t, err)
	led, err = ledger.OpenExisting(db)
	assert.NilError(t, err)
	defer led.Close()
	for _, guid := range sent {
		posts := st.ByGUID[guid]
		r, err := led.Get(context.Background(), guid)
		if _, ok := answered[guid]; ok {
			assert.Check(t, err, guid)
			assert.Check(t, r.State == ledger.StateDone && r.RspCode == string(generated.RspHTTP200) && posts == 1,
				"%s: answered 0000; row %s/%s, posted %d times", guid, r.State, r.RspCode, posts)
			continue
		}
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			assert.Check(t, posts == 0, "%s: no row, posted %d times", guid, posts)
		case err != nil:
			t.Errorf("%s: %v", guid, err)
		case r.State == ledger.StateDone:
			assert.Check(t, posts == 1, "%s: DONE, posted %d times", guid, posts)
		case r.State == ledger.StateFailed:
			assert.Check(t, posts == 0, "%s: FAILED, posted %d times", guid, posts)
		case r.State == ledger.StateSent:
			assert.Check(t, posts <= 1, "%s: SENT, posted %d times", guid, posts)
		default:
			t.Errorf("%s: unanswered, row %s", guid, r.State)
		}
	}
}
