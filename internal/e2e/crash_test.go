package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/channel"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

// TestCrashMidCallSettledByResolve: a relay process dies (SIGKILL) while the
// core is posting a SLOW transfer. The claim was on disk before the call, so
// the row is SENT; a new relay on the same file answers a retry E903 and
// never resends; resolve --stale-sent settles the row by inquiry (DONE,
// 0000, the core's own answer), after which a retry gets that answer byte
// for byte. The core posted the transfer exactly once.
func TestCrashMidCallSettledByResolve(t *testing.T) {
	relayBin, coresimBin := binaries(t)
	t.Parallel()
	_, coreURL := startCore(t, coresimBin, "2")
	db := filepath.Join(t.TempDir(), "relay.db")
	first := startRelay(t, relayBin, coreURL, db, "5") // --timeout above the delay: the call is in flight when killed

	guid := channel.NewGUID()
	frame := transfer(t, guid, "SLOW crash test")
	pending := sendAsync(t, first.addr, frame, 10*time.Second)
	waitReceived(t, coreURL, guid)
	first.signal(t, syscall.SIGKILL)
	assert.Equal(t, first.wait(t, 10*time.Second), -1, "killed by the signal")
	select {
	case r := <-pending:
		assert.ErrorIs(t, r.err, channel.ErrNoAnswer, "the channel got %q", r.raw)
	case <-time.After(10 * time.Second):
		t.Fatal("the channel's connection did not end with the relay")
	}

	// The claim was committed before the core was called; the outcome was
	// never recorded.
	r := row(t, db, guid)
	assert.Equal(t, r.State, ledger.StateSent)
	assert.Equal(t, r.Attempts, 1)
	assert.DeepEqual(t, r.Request, frame)

	// A new relay on the same file: the retry is E903 and is not sent.
	second := startRelay(t, relayBin, coreURL, db, "5")
	a := send(t, second.addr, frame)
	assert.Equal(t, a.Code, generated.RspInProgress)
	assert.Equal(t, a.Header.GUID, guid)
	assert.Equal(t, postsFor(t, coreURL, guid), 1)

	// resolve runs, as its own process, while the second relay serves, as a
	// scheduler would run it. It prints its one-line summary and exits 0.
	resolve := func(staleSent string) string {
		t.Helper()
		cmd := exec.Command(resolveBin(t), "--db", db, "--core", coreURL, "--min-age", "60", "--stale-sent", staleSent)
		out, err := cmd.Output()
		assert.NilError(t, err, "resolve: %s", out)
		return strings.TrimSpace(string(out))
	}

	// A SENT row younger than --stale-sent may be a live call: left alone.
	assert.Equal(t, resolve("3600"), "resolve: selected=0 done=0 failed=0 unreachable=0 skipped=0 unknown_tx=0 undecodable=0")
	assert.Equal(t, row(t, db, guid).State, ledger.StateSent)

	// Once the core has posted it and the row is older than --stale-sent,
	// resolve settles it from GET /v1/transfers/{guid}.
	waitPosted(t, coreURL, guid)
	ageRow(t, db, guid, ledger.StateSent, time.Minute)
	assert.Equal(t, resolve("1"), "resolve: selected=1 done=1 failed=0 unreachable=0 skipped=0 unknown_tx=0 undecodable=0")

	r = row(t, db, guid)
	assert.Equal(t, r.State, ledger.StateDone)
	assert.Equal(t, r.RspCode, string(generated.RspHTTP200))
	assert.Equal(t, r.Attempts, 1, "never resent")
	stored, err := channel.Decode(r.Response)
	assert.NilError(t, err)
	assert.Equal(t, stored.Code, generated.RspHTTP200)
	assert.Equal(t, stored.Header.GUID, guid)
	var posted struct {
		TxID    string `json:"txId"`
		Balance int64  `json:"balance"`
	}
	resp, err := http.Get(coreURL + "/v1/transfers/" + guid)
	assert.NilError(t, err)
	assert.NilError(t, json.NewDecoder(resp.Body).Decode(&posted))
	resp.Body.Close()
	body := stored.Body.(*generated.BKTR0001Response)
	assert.Equal(t, body.CoreTxid, posted.TxID, "the stored answer is the core's posting")
	assert.Equal(t, body.Balance, posted.Balance)

	// Every retry now gets that answer, byte for byte, without a call.
	assert.Assert(t, bytes.Equal(sendRaw(t, second.addr, frame), r.Response))
	retry := transfer(t, guid, "SLOW crash test") // a new SENT_AT, same request
	assert.Assert(t, bytes.Equal(sendRaw(t, second.addr, retry), r.Response))
	st, err := coreStats(coreURL)
	assert.NilError(t, err)
	assert.Equal(t, st.ByGUID[guid], 1, "the core received the transfer once")
	assert.Equal(t, st.Calls, 1)

	second.signal(t, syscall.SIGTERM)
	assert.Equal(t, second.wait(t, 15*time.Second), 0)
}

// TestGracefulStopLeavesNoSentRow: SIGTERM while a SLOW call is in flight.
// The relay finishes the frame (answering the channel), exits 0, and the
// row is settled, never left SENT: DONE when the core answers within
// --timeout, UNKNOWN (E901) when it does not.
func TestGracefulStopLeavesNoSentRow(t *testing.T) {
	relayBin, coresimBin := binaries(t)
	t.Parallel()
	for _, tc := range []struct {
		name    string
		delay   string        // coresim --delay
		timeout string        // relay --timeout
		within  time.Duration // the call cannot end sooner than this after the frame is sent
		want    generated.RspCode
		state   ledger.State
	}{
		{"core answers within the timeout", "2", "8", 2 * time.Second, generated.RspHTTP200, ledger.StateDone},
		{"core slower than the timeout", "8", "2", 2 * time.Second, generated.RspReadTimeout, ledger.StateUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, coreURL := startCore(t, coresimBin, tc.delay)
			db := filepath.Join(t.TempDir(), "relay.db")
			relay := startRelay(t, relayBin, coreURL, db, tc.timeout)
			guid := channel.NewGUID()
			sent := time.Now()
			pending := sendAsync(t, relay.addr, transfer(t, guid, "SLOW graceful stop"), 15*time.Second)
			waitReceived(t, coreURL, guid)
			relay.signal(t, syscall.SIGTERM)
			// The call had not ended when the signal went: it was in flight.
			assert.Assert(t, time.Since(sent) < tc.within, "signal sent %v after the frame: too late to test a call in flight", time.Since(sent))

			var r sendResult
			select {
			case r = <-pending:
			case <-time.After(15 * time.Second):
				t.Fatal("no answer after SIGTERM")
			}
			assert.NilError(t, r.err)
			a, err := channel.Decode(r.raw)
			assert.NilError(t, err)
			assert.Equal(t, a.Code, tc.want)
			assert.Equal(t, a.Header.GUID, guid)
			assert.Equal(t, relay.wait(t, 15*time.Second), 0, "clean stop")

			got := row(t, db, guid)
			assert.Equal(t, got.State, tc.state)
			assert.Equal(t, got.RspCode, string(tc.want))
			assert.DeepEqual(t, got.Response, r.raw)
			assert.Equal(t, postsFor(t, coreURL, guid), 1)
		})
	}
}
