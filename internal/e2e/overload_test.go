package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/channel"
	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
)

// overloadCell is one of BenchmarkOverloadGrid's worst cells
// (internal/relay), run with real processes: coresim serving capacity
// transfers at a time for service each and queueing the rest, a relay with
// --timeout timeout and its SQLite ledger, offered load times the core's
// capacity for runFor, every frame a new GUID.
type overloadCell struct {
	capacity int
	service  time.Duration
	timeout  time.Duration
	load     int
	runFor   time.Duration
}

type overloadResult struct {
	codes   map[generated.RspCode]int
	guids   int
	goodput float64 // 0000 answers within the run, as a share of what the core could answer
	posts   map[string]int
	e902    []string
}

func (r overloadResult) e901Share() float64 {
	return float64(r.codes[generated.RspReadTimeout]) / float64(max(r.guids, 1))
}

// runOverloadCell runs c against a relay started with relayArgs on top of
// the usual ones.
func runOverloadCell(t *testing.T, c overloadCell, relayArgs ...string) overloadResult {
	t.Helper()
	relayBin, coresimBin := shippedBinaries(t)
	secs := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }
	core := startProc(t, "coresim", coresimBin, "coresim listening on ", "--port", "0",
		"--max-concurrent", strconv.Itoa(c.capacity), "--service", secs(c.service))
	rate := float64(c.load*c.capacity) / c.service.Seconds()
	conns := int(rate*c.timeout.Seconds()) + 16 // enough for every frame to wait the whole timeout
	args := append([]string{"--port", "0", "--core", core.addr, "--db", filepath.Join(t.TempDir(), "relay.db"), "--timeout", secs(c.timeout),
		"--max-conns", strconv.Itoa(conns + 16), "--max-conns-per-addr", strconv.Itoa(conns + 16)}, relayArgs...)
	relay := startProc(t, "relay", relayBin, "relay listening on ", args...)

	type answer struct {
		guid string
		code generated.RspCode
		at   time.Duration
	}
	frames := make(chan struct{}, conns)
	answers := make(chan answer, int(rate*c.runFor.Seconds())+conns)
	var wg sync.WaitGroup
	start := time.Now()
	for range conns {
		conn, err := channel.Dial(context.Background(), relay.addr, c.timeout+10*time.Second)
		assert.NilError(t, err)
		t.Cleanup(func() { conn.Close() })
		wg.Go(func() {
			for range frames {
				guid := testkit.GUID()
				raw, err := conn.Send(testkit.Transfer(t, guid, map[string]string{"wdAcct": "11002003004007", "amount": "1", "memo": "overload"}))
				if err != nil {
					t.Errorf("send %s: %v", guid, err)
					return
				}
				a, err := channel.Decode(raw)
				if err != nil {
					t.Errorf("answer to %s: %v", guid, err)
					return
				}
				answers <- answer{guid, a.Code, time.Since(start)}
			}
		})
	}
	start = time.Now()
	offered := 0
	tick := time.NewTicker(time.Millisecond)
	for now := range tick.C {
		el := now.Sub(start)
		if el >= c.runFor {
			break
		}
		for ; float64(offered) < rate*el.Seconds(); offered++ {
			select {
			case frames <- struct{}{}:
			default:
				t.Fatalf("every one of %d connections busy: the load needs more", conns)
			}
		}
	}
	tick.Stop()
	close(frames)
	wg.Wait()
	close(answers)

	r := overloadResult{codes: map[generated.RspCode]int{}, posts: map[string]int{}}
	done := 0
	for a := range answers {
		r.guids++
		r.codes[a.code]++
		if a.code == generated.RspHTTP200 && a.at <= c.runFor {
			done++
		}
		if a.code == generated.RspConnectFail {
			r.e902 = append(r.e902, a.guid)
		}
	}
	stats, err := coreStats(core.addr)
	assert.NilError(t, err)
	r.posts = stats.ByGUID
	r.goodput = float64(done) / (float64(c.capacity) / c.service.Seconds() * (c.runFor - c.service).Seconds())
	t.Logf("%s: %d GUIDs, answers by code %v, E901 %.2f%% of GUIDs, goodput %.1f%% of the core's capacity",
		fmt.Sprint(relayArgs), r.guids, r.codes, 100*r.e901Share(), 100*r.goodput)
	return r
}

// TestOverloadWorstCells: the cells of the overload grid where admission
// has the least room, with real processes: a core whose service time is
// close to --timeout (300 ms against 1 s: a call is E901 once more than
// about three times the core's capacity are ahead of it), offered twice
// and five times its capacity. E901 stays within 2% of the GUIDs and
// goodput at 60% of the core's capacity or more (the benchmark's numbers
// are 0-1% and 80-100%; the margins are for a loaded machine). With
// admission off (--max-inflight 0) the same runs give tens of percent of
// E901 (the queue grows past the timeout within a second or two), so the
// bound on E901 cannot pass without it. Every E902 is a transfer the core
// never received, and nothing is posted twice. The processes are built as
// they ship (shippedBinaries): under -race the relay's own work takes
// several times longer, and a 300 ms call looked 450-540 ms to the
// limiter, which read it as queueing at the core.
func TestOverloadWorstCells(t *testing.T) {
	for _, c := range []overloadCell{
		{capacity: 20, service: 300 * time.Millisecond, timeout: time.Second, load: 2, runFor: 4 * time.Second},
		{capacity: 64, service: 300 * time.Millisecond, timeout: time.Second, load: 5, runFor: 4 * time.Second},
		{capacity: 4, service: 300 * time.Millisecond, timeout: time.Second, load: 5, runFor: 4 * time.Second},
	} {
		t.Run(fmt.Sprintf("cap=%d/svc=%v/timeout=%v/%dx", c.capacity, c.service, c.timeout, c.load), func(t *testing.T) {
			r := runOverloadCell(t, c)
			assert.Assert(t, r.e901Share() <= 0.02, "E901 %.2f%% of %d GUIDs: %v", 100*r.e901Share(), r.guids, r.codes)
			assert.Assert(t, r.goodput >= 0.6, "goodput %.1f%% of the core's capacity: %v", 100*r.goodput, r.codes)
			assert.Assert(t, r.codes[generated.RspConnectFail] > 0, "a core offered %dx its capacity must shed: %v", c.load, r.codes)
			for _, guid := range r.e902 {
				assert.Equal(t, r.posts[guid], 0, "E902 for a transfer the core received: %s", guid)
			}
			for guid, n := range r.posts {
				assert.Assert(t, n <= 1, "%s posted %d times", guid, n)
			}
		})
	}
}

// TestOverloadWorstCellWithoutAdmission is TestOverloadWorstCells' first
// cell with admission off: the bound on E901 it asserts does not hold
// there, so that test measures admission and not the load.
func TestOverloadWorstCellWithoutAdmission(t *testing.T) {
	c := overloadCell{capacity: 20, service: 300 * time.Millisecond, timeout: time.Second, load: 2, runFor: 4 * time.Second}
	r := runOverloadCell(t, c, "--max-inflight", "0")
	assert.Assert(t, r.e901Share() > 0.02, "without admission E901 is %.2f%% of the GUIDs: the bound would not tell", 100*r.e901Share())
}
