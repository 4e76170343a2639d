package e2e

import (
	"bytes"
	"context"
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
	relay := startRelay(t, relayBin, coreURL, db, "5")

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
	assert.Assert(t, strings.Contains(string(out), "failed=0 unreachable=0"), string(out))
	for _, guid := range stale {
		r := row(t, db, guid)
		assert.Equal(t, r.State, ledger.StateDone, guid)
		assert.Equal(t, r.RspCode, string(generated.RspHTTP200), guid)
	}

	st, err := coreStats(coreURL)
	assert.NilError(t, err)
	for _, guid := range sent {
		_, ok := answered[guid]
		switch n := st.ByGUID[guid]; {
		case ok && n != 1:
			t.Errorf("%s: answered, posted %d times", guid, n)
		case n > 1:
			t.Errorf("%s: posted %d times", guid, n)
		}
	}
}
