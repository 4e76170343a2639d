package e2e

import (
	"bytes"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/channel"
	"lhrelay/internal/faultproxy"
	"lhrelay/internal/generated"
	"lhrelay/internal/pgtest"
)

// failoverLoad runs workers channels against relays until stop, each
// sending new transfers until posted (retrying E902, E903, E901 and lost
// answers, as a channel that will not give up does), and records each
// GUID's first 0000 with the time it arrived.
type failoverLoad struct {
	mu       sync.Mutex
	answered map[string]posted // GUID → its first 0000
	all      []string
	seen     codeCounts
	done     atomic.Int64
}

type posted struct {
	raw []byte
	at  time.Time
}

func (fl *failoverLoad) run(t *testing.T, relays []string, workers int, stop <-chan struct{}) *sync.WaitGroup {
	fl.answered = map[string]posted{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				g := channel.NewGUID()
				fl.mu.Lock()
				fl.all = append(fl.all, g)
				fl.mu.Unlock()
				raw := untilPosted(t, rotate(relays, w+i), transfer(t, g, "failover"), 90*time.Second, &fl.seen)
				if raw != nil {
					fl.mu.Lock()
					fl.answered[g] = posted{raw: raw, at: time.Now()}
					fl.mu.Unlock()
				}
				fl.done.Add(1)
			}
		}()
	}
	return &wg
}

// TestFailoverToASynchronousStandbyForgetsNothing: two relays share a
// ledger on a primary streaming synchronously to a standby, through a
// multi-host URL with target_session_attrs=read-write. Under load the
// primary is killed (SIGKILL of the postmaster) and the standby promoted.
// Then every GUID answered 0000 before the kill is retried: each retry is
// that 0000 again (the row was on the standby), and the core saw one POST
// per GUID, for every GUID of the run.
func TestFailoverToASynchronousStandbyForgetsNothing(t *testing.T) {
	relayBin, coresimBin := binaries(t)
	pair := pgtest.NewPair(t, true, pgtest.Options{})
	db := pair.URL()
	_, coreURL := startCore(t, coresimBin, "1")
	relays := startRelays(t, relayBin, coreURL, db, "2", "2")

	stopResolver := make(chan struct{})
	resolverDone := resolver(t, db, coreURL, "4", stopResolver)
	defer func() { close(stopResolver); <-resolverDone }()

	var load failoverLoad
	stop := make(chan struct{})
	wg := load.run(t, relays, 8, stop)
	poll(t, 60*time.Second, "200 transfers posted", func() (bool, error) { return load.done.Load() >= 200, nil })

	killedAt := time.Now()
	pair.Failover(t)
	promoted := time.Since(killedAt)
	poll(t, 60*time.Second, "100 more transfers posted after the failover", func() (bool, error) { return load.done.Load() >= 300, nil })
	close(stop)
	wg.Wait()

	// Every GUID answered 0000 before the kill, retried on each relay.
	var before []string
	for g, p := range load.answered {
		if p.at.Before(killedAt) {
			before = append(before, g)
		}
	}
	var seen codeCounts
	identical, sameButSentAt := 0, 0
	for i, g := range before {
		first := load.answered[g].raw
		again := untilPosted(t, rotate(relays, i), transfer(t, g, "failover"), 30*time.Second, &seen)
		switch {
		case bytes.Equal(again, first):
			identical++
		case sameExceptSentAt(again, first):
			// The 0000 went out while its outcome's commit was on its
			// way (answered before recorded) and the commit was lost
			// with the primary: the row was SENT on the standby and
			// was settled by its lookup, to the same answer.
			sameButSentAt++
		default:
			t.Errorf("retry of %s: %q, first answer %q", g, again, first)
		}
	}
	st, err := coreStats(coreURL)
	assert.NilError(t, err)
	for _, g := range load.all {
		assert.Check(t, is.Equal(st.ByGUID[g], 1), "POSTs for %s", g)
	}
	t.Logf("synchronous standby: %d GUIDs in all, %d answered 0000 before the kill and retried: %d byte-identical replays, %d the same answer but for SENT_AT (outcome settled by lookup); core POSTs %d; promote took %v; codes during the load %v, during the retries %v",
		len(load.all), len(before), identical, sameButSentAt, st.Calls, promoted.Round(time.Millisecond), &load.seen, &seen)
	assert.Assert(t, len(before) >= 200)
	assert.Equal(t, identical+sameButSentAt, len(before))
}

// sameExceptSentAt: two answers identical but for SENT_AT.
func sameExceptSentAt(a, b []byte) bool {
	h := generated.HeaderLen
	if len(a) != len(b) || len(a) < h {
		return false
	}
	const sentAt, sentAtEnd = 55, 69 // SPEC 1: the header's SENT_AT
	return bytes.Equal(a[:sentAt], b[:sentAt]) && bytes.Equal(a[sentAtEnd:], b[sentAtEnd:])
}

// TestAsynchronousStandbyIsRefused: on a primary streaming to a standby
// while synchronous_standby_names is empty, the relay refuses to start
// (exit 2, one line naming the setting and the flag); with
// --allow-async-replication it starts and says so on /readyz.
func TestAsynchronousStandbyIsRefused(t *testing.T) {
	relayBin, coresimBin := binaries(t)
	pair := pgtest.NewPair(t, false, pgtest.Options{})
	_, coreURL := startCore(t, coresimBin, "1")

	cmd := exec.Command(relayBin, "--port", "0", "--core", coreURL, "--db", pair.URL())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	assert.Equal(t, cmd.ProcessState.ExitCode(), 2, "%v: %s", err, stderr.String())
	line := stderr.String()
	assert.Check(t, strings.Count(line, "\n") == 1, line)
	assert.Check(t, is.Contains(line, "synchronous_standby_names"))
	assert.Check(t, is.Contains(line, "--allow-async-replication"))

	p := startProc(t, "relay", relayBin, "metrics listening on ",
		"--port", "0", "--core", coreURL, "--db", pair.URL(), "--allow-async-replication", "--metrics-addr", "127.0.0.1:0")
	resp, err := http.Get(p.addr + "/readyz")
	assert.NilError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, resp.StatusCode, http.StatusOK)
	assert.Check(t, is.Contains(string(body), "warning"))
	assert.Check(t, is.Contains(string(body), "asynchronously"))
	resp, err = http.Get(p.addr + "/metrics")
	assert.NilError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Check(t, is.Contains(string(body), `lhrelay_ledger_replication_unsafe{reason="async"} 1`))
	assert.Check(t, is.Contains(string(body), `lhrelay_ledger_standbys{mode="async"} 1`))
}

// TestFailoverToAnAsynchronousStandbyPostsTwice shows why the relay refuses
// an asynchronous standby by default: the same load and failover, with
// --allow-async-replication and a standby that lags (its stream, through
// a proxy, is cut halfway through the load, as a busy or distant standby
// falls behind). GUIDs answered 0000 whose claims the standby never
// received are new transfers to the promoted primary: their retries are
// posted again.
func TestFailoverToAnAsynchronousStandbyPostsTwice(t *testing.T) {
	relayBin, coresimBin := binaries(t)
	var stream *faultproxy.Proxy
	pair := pgtest.NewPair(t, false, pgtest.Options{StandbyVia: func(primary string) string {
		p, err := faultproxy.Start(primary)
		assert.NilError(t, err)
		t.Cleanup(func() { p.Close() })
		stream = p
		return p.Addr()
	}})
	db := pair.URL()
	_, coreURL := startCore(t, coresimBin, "1")
	var relays []string
	for range 2 {
		relays = append(relays, startProc(t, "relay", relayBin, "relay listening on ",
			"--port", "0", "--core", coreURL, "--db", db, "--timeout", "2", "--allow-async-replication").addr)
	}
	stopResolver := make(chan struct{})
	resolverDone := resolver(t, db, coreURL, "4", stopResolver)
	defer func() { close(stopResolver); <-resolverDone }()

	var load failoverLoad
	stop := make(chan struct{})
	wg := load.run(t, relays, 8, stop)
	poll(t, 60*time.Second, "100 transfers posted", func() (bool, error) { return load.done.Load() >= 100, nil })
	stream.Close() // the standby stops receiving WAL
	poll(t, 60*time.Second, "200 transfers posted", func() (bool, error) { return load.done.Load() >= 200, nil })
	close(stop)
	wg.Wait()

	killedAt := time.Now()
	pair.Failover(t)

	var seen codeCounts
	retried := 0
	for i, g := range load.all {
		if p, ok := load.answered[g]; !ok || !p.at.Before(killedAt) {
			continue
		}
		retried++
		untilPosted(t, rotate(relays, i), transfer(t, g, "failover"), 30*time.Second, &seen)
	}
	st, err := coreStats(coreURL)
	assert.NilError(t, err)
	twice := 0
	for _, g := range load.all {
		if st.ByGUID[g] > 1 {
			twice++
		}
	}
	t.Logf("asynchronous standby, lagging: %d GUIDs answered 0000 before the kill and retried; %d of them posted a second time; core POSTs %d for %d GUIDs; codes during the retries %v",
		retried, twice, st.Calls, len(load.all), &seen)
	assert.Assert(t, twice > 0, "a lagging asynchronous standby forgot no claim: the test did not make it lag")
}
