package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/channel"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/testkit"
)

// Several relay processes on one PostgreSQL ledger (SPEC 6a), as a bank
// runs them behind its channels' load balancer: one GUID is one transfer
// whichever relay a retry reaches, through a relay's death and through a
// restart of the database.

// startRelays starts n relays on the ledger db, each with its --timeout.
func startRelays(t *testing.T, relayBin, coreURL, db string, timeouts ...string) []string {
	t.Helper()
	addrs := make([]string, len(timeouts))
	for i, to := range timeouts {
		addrs[i] = startRelay(t, relayBin, coreURL, db, to).addr
	}
	return addrs
}

// amountTransfer is transfer with its own amount (a different request for
// the same GUID).
func amountTransfer(t *testing.T, guid, memo, amount string) []byte {
	t.Helper()
	return testkit.Transfer(t, guid, map[string]string{"memo": memo, "amount": amount})
}

// trySend sends frame to addr on a new connection: the answer, or an error
// when the relay gave none (it died, it is gone).
func trySend(addr string, frame []byte) (channel.Answer, []byte, error) {
	c, err := channel.Dial(context.Background(), addr, 10*time.Second)
	if err != nil {
		return channel.Answer{}, nil, err
	}
	defer c.Close()
	raw, err := c.Send(frame)
	if err != nil {
		return channel.Answer{}, nil, err
	}
	a, err := channel.Decode(raw)
	return a, raw, err
}

// untilPosted is a channel that will not give up: it sends frame to the
// relays in turn, and again after each E902, E903, E901 or missing answer
// (a channel retrying the same GUID, which is always safe), until it gets
// 0000, and returns that answer's bytes. Any other code fails the test.
// seen counts the codes met on the way.
func untilPosted(t *testing.T, addrs []string, frame []byte, within time.Duration, seen *codeCounts) []byte {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		a, raw, err := trySend(addrs[i%len(addrs)], frame)
		switch {
		case err != nil:
			seen.add("no answer")
		case a.Code == generated.RspHTTP200:
			seen.add(string(a.Code))
			return raw
		case a.Code == generated.RspConnectFail, a.Code == generated.RspInProgress, a.Code == generated.RspReadTimeout:
			seen.add(string(a.Code))
		default:
			t.Errorf("unexpected answer %s for %x", a.Code, frame[12:44])
			return nil
		}
		if time.Now().After(deadline) {
			t.Errorf("no 0000 within %v for %s (last: %v %v)", within, frame[12:44], a.Code, err)
			return nil
		}
		<-tick.C
	}
}

type codeCounts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *codeCounts) add(code string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[code]++
}

func (c *codeCounts) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.m)
}

// resolver runs resolve (--min-age 2, --stale-sent staleSent) every half
// second until stop is closed, as a scheduler would. staleSent must be
// longer than any core call of the relays can take: a SENT row younger
// than that may still be at the core.
func resolver(t *testing.T, db, coreURL, staleSent string, stop <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	bin := resolveBin(t)
	go func() {
		defer close(done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			// A run during a database outage fails (exit 2): the next one
			// will do.
			exec.Command(bin, "--db", db, "--core", coreURL, "--min-age", "2", "--stale-sent", staleSent).Run()
		}
	}()
	return done
}

// settleOrphans runs resolve (stale after 2 s) until no row is SENT or
// UNKNOWN: once the load has stopped, every such row was orphaned by a
// killed relay, and its turn to be stale comes by the database's clock.
func settleOrphans(t *testing.T, db, coreURL string) {
	t.Helper()
	bin := resolveBin(t)
	poll(t, 30*time.Second, "every orphan settled by resolve", func() (bool, error) {
		if out, err := exec.Command(bin, "--db", db, "--core", coreURL, "--min-age", "0", "--stale-sent", "2").CombinedOutput(); err != nil {
			return false, fmt.Errorf("resolve: %v: %s", err, out)
		}
		l, err := ledger.OpenExisting(db)
		if err != nil {
			return false, err
		}
		defer l.Close()
		counts, err := l.Stats(context.Background())
		if err != nil {
			return false, err
		}
		for _, c := range counts.ByCode {
			if c.State == ledger.StateSent || c.State == ledger.StateUnknown {
				return false, fmt.Errorf("%d rows %s", c.Count, c.State)
			}
		}
		return true, nil
	})
}

// checkEveryGUIDPostedOnceAndDone: the core posted each GUID exactly once,
// and the ledger holds every one DONE/0000, nothing else.
func checkEveryGUIDPostedOnceAndDone(t *testing.T, db, coreURL string, guids []string) {
	t.Helper()
	st, err := coreStats(coreURL)
	assert.NilError(t, err)
	for _, g := range guids {
		assert.Check(t, is.Equal(st.ByGUID[g], 1), "POSTs for %s", g)
	}
	l, err := ledger.OpenExisting(db)
	assert.NilError(t, err)
	defer l.Close()
	// A 0000 goes to the channel while its DONE commit is on the way
	// (outcome.AnswerBeforeRecord): a relay still running may hold
	// outcomes it has answered but not yet committed, which a database
	// that just came back delays. Every one of them lands, or the relay
	// logs it at error; wait for them before comparing.
	want := []ledger.CodeCount{{State: ledger.StateDone, RspCode: string(generated.RspHTTP200), Count: int64(len(guids))}}
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		counts, err := l.Stats(context.Background())
		assert.NilError(t, err)
		settled := len(counts.ByCode) == 1 && counts.ByCode[0] == want[0]
		if settled || time.Now().After(deadline) {
			assert.DeepEqual(t, counts.ByCode, want)
			return
		}
		<-tick.C
	}
}

// TestSharedLedgerOneGUIDThreeRelays: 100 frames of one GUID at once,
// spread across three relays: the core sees one POST; every answer is E903
// or the same 0000, byte for byte. Once the row is DONE, a retry of the GUID
// on each relay is that answer; the GUID with another amount is E904 on each.
func TestSharedLedgerOneGUIDThreeRelays(t *testing.T) {
	relayBin, coresimBin := binaries(t)
	db := pgtest.URL(t)
	_, coreURL := startCore(t, coresimBin, "0.5")
	relays := startRelays(t, relayBin, coreURL, db, "5", "5", "5")

	guid := channel.NewGUID()
	frame := transfer(t, guid, "SLOW one guid")
	const n = 100
	conns := make([]*channel.Conn, n)
	for i := range conns { // dialled first, so the frames leave together
		c, err := channel.Dial(context.Background(), relays[i%3], 10*time.Second)
		assert.NilError(t, err)
		t.Cleanup(func() { c.Close() })
		conns[i] = c
	}
	answers := make([][]byte, n)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			raw, err := c.Send(frame)
			assert.Check(t, err)
			answers[i] = raw
		}()
	}
	wg.Wait()

	var posted []byte
	codes := map[generated.RspCode]int{}
	for _, raw := range answers {
		a, err := channel.Decode(raw)
		assert.NilError(t, err)
		codes[a.Code]++
		if a.Code != generated.RspHTTP200 {
			assert.Equal(t, a.Code, generated.RspInProgress)
			continue
		}
		if posted == nil {
			posted = raw
		}
		assert.Assert(t, bytes.Equal(raw, posted), "two different 0000 answers:\n%q\n%q", raw, posted)
	}
	t.Logf("answers: %v", codes)
	assert.Assert(t, posted != nil, "nobody got the 0000")
	assert.Equal(t, postsFor(t, coreURL, guid), 1)

	// A transfer is settled by a lookup, so its 0000 was answered while the
	// DONE row's commit was on the way (README design notes): until that
	// commit lands, the row is SENT for the other relays and a retry there
	// is rightly E903 (SPEC 6a). Replay byte for byte is owed once it is DONE.
	poll(t, 10*time.Second, "the row of "+guid+" to be DONE", func() (bool, error) {
		st := row(t, db, guid).State
		return st == ledger.StateDone, fmt.Errorf("state %s", st)
	})
	for _, addr := range relays {
		assert.DeepEqual(t, sendRaw(t, addr, transfer(t, guid, "SLOW one guid")), posted)
		a := send(t, addr, amountTransfer(t, guid, "SLOW one guid", "777"))
		assert.Equal(t, a.Code, generated.RspGUIDReused)
	}
	assert.Equal(t, postsFor(t, coreURL, guid), 1)
	checkEveryGUIDPostedOnceAndDone(t, db, coreURL, []string{guid})
}

// TestSharedLedgerRelayKilled: one of three relays is killed (SIGKILL)
// while its transfers are at the core, under load with duplicates on all
// three. Its orphaned GUIDs are E903 on the survivors (never resent) until
// resolve --stale-sent settles them by inquiry; then their retries get the
// core's answer. In the end every GUID was posted exactly once and is
// DONE/0000.
func TestSharedLedgerRelayKilled(t *testing.T) {
	relayBin, coresimBin := binaries(t)
	db := pgtest.URL(t)
	_, coreURL := startCore(t, coresimBin, "1.5")
	victim := startRelay(t, relayBin, coreURL, db, "5")          // above the SLOW delay: in flight when killed
	survivors := startRelays(t, relayBin, coreURL, db, "1", "1") // their calls are quick: stale after 2 s is safe
	// What the channels' balancer sends to: all three, until one dies.
	var balanced atomic.Pointer[[]string]
	balanced.Store(&[]string{victim.addr, survivors[0], survivors[1]})

	// The orphans: SLOW transfers at the core when their relay dies.
	var orphans []string
	var pending []<-chan sendResult
	for range 10 {
		g := channel.NewGUID()
		orphans = append(orphans, g)
		pending = append(pending, sendAsync(t, victim.addr, transfer(t, g, "SLOW orphan"), 10*time.Second))
	}
	for _, g := range orphans {
		waitReceived(t, coreURL, g)
	}

	// The load: 8 channels, each GUID sent twice at once (a duplicate) to
	// two relays, then retried until 0000. Some land on the victim.
	var loadGUIDs []string
	var mu sync.Mutex
	var seen codeCounts
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	var sent atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				g := channel.NewGUID()
				mu.Lock()
				loadGUIDs = append(loadGUIDs, g)
				mu.Unlock()
				f := transfer(t, g, "load")
				addrs := *balanced.Load()
				dup := make(chan struct{})
				go func() {
					defer close(dup)
					trySend(addrs[(w+i+1)%len(addrs)], f)
				}()
				untilPosted(t, rotate(addrs, w+i), f, 30*time.Second, &seen)
				<-dup
				sent.Add(1)
			}
		}()
	}
	poll(t, 10*time.Second, "load to flow", func() (bool, error) { return sent.Load() >= 40, nil })

	victim.signal(t, syscall.SIGKILL)
	assert.Equal(t, victim.wait(t, 10*time.Second), -1)
	for _, p := range pending {
		r := <-p
		assert.Check(t, r.err != nil, "an orphan was answered: %q", r.raw)
	}
	// The load goes on on the survivors only (the balancer dropped the dead one).
	balanced.Store(&survivors)

	// Orphans are in flight for the shared ledger: E903 on every survivor,
	// and not sent again.
	for _, g := range orphans {
		for _, addr := range survivors {
			a := send(t, addr, transfer(t, g, "SLOW orphan"))
			assert.Equal(t, a.Code, generated.RspInProgress, g)
		}
		assert.Equal(t, postsFor(t, coreURL, g), 1, g)
	}

	// Once the core has posted them, the scheduler's resolve settles them.
	for _, g := range orphans {
		waitPosted(t, coreURL, g)
	}
	stopResolver := make(chan struct{})
	resolverDone := resolver(t, db, coreURL, "2", stopResolver)
	var orphanAnswers [][]byte
	for _, g := range orphans {
		orphanAnswers = append(orphanAnswers, untilPosted(t, survivors, transfer(t, g, "SLOW orphan"), 30*time.Second, &seen))
	}
	close(stopLoad)
	wg.Wait()
	close(stopResolver)
	<-resolverDone
	// A transfer the victim answered 0000 just before its kill may have
	// lost its DONE commit (the answer goes out while the commit is on its
	// way): that row is an orphan too, stale only 2 s after its claim.
	settleOrphans(t, db, coreURL)
	t.Logf("%d load transfers; codes seen: %v", len(loadGUIDs), &seen)

	// A retry on the other survivor is the same answer, byte for byte.
	for i, g := range orphans {
		assert.DeepEqual(t, sendRaw(t, survivors[1], transfer(t, g, "SLOW orphan")), orphanAnswers[i])
	}
	checkEveryGUIDPostedOnceAndDone(t, db, coreURL, append(orphans, loadGUIDs...))
}

// rotate is addrs starting at index i.
func rotate(addrs []string, i int) []string {
	i %= len(addrs)
	return append(append([]string(nil), addrs[i:]...), addrs[:i]...)
}

// TestSharedLedgerDatabaseRestart: the database is restarted (pg_ctl
// restart -m fast) in the middle of a load on three relays. Channels retry
// what was not posted (E902, E903, no answer); resolve settles what the
// restart left behind. Nothing is posted twice, every transfer is posted
// once, and the relays serve again within seconds of the database's return
// without being restarted themselves.
func TestSharedLedgerDatabaseRestart(t *testing.T) {
	relayBin, coresimBin := binaries(t)
	db := pgtest.URL(t)
	_, coreURL := startCore(t, coresimBin, "1")
	relays := startRelays(t, relayBin, coreURL, db, "1", "1", "1")

	const workers, perWorker = 12, 25
	var seen codeCounts
	var lastPosted atomic.Int64 // unix nanos of the latest 0000
	guids := make([][]string, workers)
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				g := channel.NewGUID()
				guids[w] = append(guids[w], g)
				if untilPosted(t, rotate(relays, w+i), transfer(t, g, "restart"), 60*time.Second, &seen) != nil {
					lastPosted.Store(time.Now().UnixNano())
				}
				done.Add(1)
			}
		}()
	}
	stopResolver := make(chan struct{})
	resolverDone := resolver(t, db, coreURL, "3", stopResolver)
	poll(t, 20*time.Second, "a third of the load", func() (bool, error) { return done.Load() >= workers*perWorker/3, nil })

	pgtest.Restart(t)
	back := time.Now()
	poll(t, 10*time.Second, "a transfer posted after the restart", func() (bool, error) {
		return lastPosted.Load() > back.UnixNano(), nil
	})
	t.Logf("first 0000 %v after the database was back", time.Duration(lastPosted.Load()-back.UnixNano()).Round(time.Millisecond))

	wg.Wait()
	close(stopResolver)
	<-resolverDone
	t.Logf("codes seen: %v", &seen)
	var all []string
	for _, gs := range guids {
		all = append(all, gs...)
	}
	assert.Equal(t, len(all), workers*perWorker)
	checkEveryGUIDPostedOnceAndDone(t, db, coreURL, all)
}

// TestTwoReprocessAndTwoResolveProcesses: two reprocess and two resolve
// processes start at once on one database: every FAILED row is sent once,
// every UNKNOWN row settled once.
func TestTwoReprocessAndTwoResolveProcesses(t *testing.T) {
	relayBin, coresimBin := binaries(t)
	db := pgtest.URL(t)
	_, coreURL := startCore(t, coresimBin, "1")
	// A relay whose core is down makes FAILED/E902 rows; one whose
	// timeout is shorter than the core's SLOW delay makes UNKNOWN rows
	// (E901) that the core then posts. No breaker: it would answer E902
	// at once after a few of those.
	down := startProc(t, "relay", relayBin, "relay listening on ", "--port", "0", "--core", testkit.ClosedURL(t), "--db", db, "--breaker-failures", "0")
	impatient := startProc(t, "relay", relayBin, "relay listening on ", "--port", "0", "--core", coreURL, "--db", db, "--timeout", "0.3", "--breaker-failures", "0")
	const rows = 20
	var failed, unknown []string
	for range rows {
		g := channel.NewGUID()
		assert.Equal(t, send(t, down.addr, transfer(t, g, "never sent")).Code, generated.RspConnectFail)
		failed = append(failed, g)
		g = channel.NewGUID()
		assert.Equal(t, send(t, impatient.addr, transfer(t, g, "SLOW unknown")).Code, generated.RspReadTimeout)
		unknown = append(unknown, g)
	}
	for _, g := range unknown {
		waitPosted(t, coreURL, g)
	}

	type run struct {
		name string
		out  []byte
		err  error
	}
	runs := make(chan run, 4)
	start := make(chan struct{})
	for _, c := range [][]string{
		{"reprocess", "--max-attempts", "3"},
		{"reprocess", "--max-attempts", "3"},
		{"resolve", "--min-age", "0"},
		{"resolve", "--min-age", "0"},
	} {
		cmd := exec.Command(binPath(t, c[0]), append([]string{"--db", db, "--core", coreURL}, c[1:]...)...)
		go func() {
			<-start
			out, err := cmd.Output()
			runs <- run{c[0], out, err}
		}()
	}
	close(start)
	sum := map[string]int{}
	for range 4 {
		r := <-runs
		assert.NilError(t, r.err, "%s: %s", r.name, r.out)
		t.Logf("%s", bytes.TrimSpace(r.out))
		for _, m := range regexp.MustCompile(`(\w+)=(\d+)`).FindAllStringSubmatch(string(r.out), -1) {
			n, _ := strconv.Atoi(m[2])
			sum[r.name+"."+m[1]] += n
		}
	}
	assert.Equal(t, sum["reprocess.0000"], rows, "%v", sum)
	assert.Equal(t, sum["resolve.done"], rows, "%v", sum)
	assert.Equal(t, sum["resolve.failed"], 0, "%v", sum)
	checkEveryGUIDPostedOnceAndDone(t, db, coreURL, append(failed, unknown...))
	for _, g := range failed {
		assert.Equal(t, row(t, db, g).Attempts, 2, "sent once more, by one run")
	}
}
