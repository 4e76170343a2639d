package relay

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lhrelay/internal/admit"
	"lhrelay/internal/breaker"
	"lhrelay/internal/corecall"
	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

// BenchmarkOverload offers a core of fixed capacity (4 transfers at a time,
// 40 ms each: 100 transfers/s) twice and five times what it can take, from
// 600 channel connections, for 9 s: 3 s normal, 3 s with the core's latency
// raised tenfold (capacity 10/s), 3 s normal again. The relay has its SQLite
// ledger, --timeout 1 and the default breaker; each load runs with
// admission on (the relay's default limiter) and off, one after the other.
// It is one cell of BenchmarkOverloadGrid, kept for its history; the
// metrics are described there. One iteration is one run: use -benchtime 1x.
//
//	go test -run '^$' -bench 'Overload$' -benchtime 1x -v ./internal/relay/
func BenchmarkOverload(b *testing.B) {
	for _, load := range []int{2, 5} {
		for _, on := range []bool{true, false} {
			c := ovCell{capacity: 4, service: 40 * time.Millisecond, timeout: time.Second, load: load, spike: true, admission: on, conns: 600, length: 9 * time.Second}
			b.Run(fmt.Sprintf("load=%dx/admission=%s", load, onOff(on)), func(b *testing.B) {
				for range b.N {
					runOverloadCell(b, c).report(b)
				}
			})
		}
	}
}

var ovCellLength = flag.Duration("overload-cell", 4*time.Second, "length of one BenchmarkOverloadGrid cell (the offered load's duration)")

// BenchmarkOverloadGrid runs the overload targets over a grid of core
// shapes: capacity (calls the core serves at once) 4, 20 and 64; service
// time 10, 100 and 300 ms; --timeout 1 and 5 s; a core that queues beyond
// its capacity and one that refuses beyond it (503, coresim's
// RefuseBeyond). Each shape is offered 2x and 5x its capacity, and 2x with
// the service time raised tenfold for the middle third of the cell
// ("spike"); each with admission on (the relay's defaults) and off, one
// after the other, so that on and off compare within one run. A cell lasts
// -overload-cell (4 s); the whole grid (216 cells) about 20 minutes.
// Sub-benchmarks are named cap=C/svc=S/timeout=T/KIND/LOAD/admission=on|off,
// so -bench selects any part of the grid. At the end it prints one table
// of every cell that ran.
//
// Channels send a new GUID per frame and resend a GUID answered E902 (the
// same GUID: nothing was sent) as their next frame, up to twice. Frames
// arrive at the offered rate, each on an idle connection; a frame that
// finds every connection busy is not sent (counted as "not sent").
//
// Columns: E901 as a share of GUIDs and of answers; goodput, the 0000
// answers given during the cell as a share of what the core can answer in
// that time (capacity/service times the cell less one service time, the
// spike's third at a tenth); the E902 answers' p50 and p99; E500 (the
// refusing core's 503s); breaker openings; transfers posted more than once
// (must be 0); and calls the core received for an answer that was E902
// (must be 0).
//
//	go test -run '^$' -bench OverloadGrid -benchtime 1x ./internal/relay/ [-overload-cell 3s]
func BenchmarkOverloadGrid(b *testing.B) {
	var rows []ovResult
	for _, capacity := range []int{4, 20, 64} {
		for _, service := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond} {
			for _, timeout := range []time.Duration{time.Second, 5 * time.Second} {
				for _, refuse := range []bool{false, true} {
					for _, load := range []struct {
						n     int
						spike bool
					}{{2, false}, {5, false}, {2, true}} {
						for _, on := range []bool{true, false} {
							c := ovCell{capacity: capacity, service: service, timeout: timeout, refuse: refuse, load: load.n, spike: load.spike, admission: on, length: *ovCellLength}
							b.Run(c.name(), func(b *testing.B) {
								for range b.N {
									r := runOverloadCell(b, c)
									r.report(b)
									rows = append(rows, r)
								}
							})
						}
					}
				}
			}
		}
	}
	if len(rows) > 0 {
		printOverloadTable(os.Stdout, rows)
	}
}

func onOff(on bool) string { return map[bool]string{true: "on", false: "off"}[on] }

// ovCell is one cell of the grid: a core shape, a load and admission on or
// off.
type ovCell struct {
	capacity  int
	service   time.Duration
	timeout   time.Duration
	refuse    bool // the core refuses (503) beyond its capacity instead of queueing
	load      int  // offered, in multiples of the core's capacity
	spike     bool // the service time is ten times longer for the middle third
	admission bool
	conns     int // channel connections; 0: enough for the load
	length    time.Duration
}

func (c ovCell) kind() string { return map[bool]string{false: "queue", true: "refuse"}[c.refuse] }

func (c ovCell) loadName() string {
	if c.spike {
		return fmt.Sprintf("%dx+spike", c.load)
	}
	return fmt.Sprintf("%dx", c.load)
}

func (c ovCell) name() string {
	return fmt.Sprintf("cap=%d/svc=%v/timeout=%v/%s/%s/admission=%s", c.capacity, c.service, c.timeout, c.kind(), c.loadName(), onOff(c.admission))
}

// rate is the core's capacity in transfers a second.
func (c ovCell) rate() float64 { return float64(c.capacity) / c.service.Seconds() }

// served is what the core can answer within the cell: nothing before its
// first service time is over, a tenth of its rate during the spike.
func (c ovCell) served() float64 {
	d := c.length.Seconds() - c.service.Seconds()
	if c.spike {
		d -= c.length.Seconds() / 3 * 9 / 10
	}
	return c.rate() * d
}

type ovResult struct {
	cell                 ovCell
	offered, notSent     int
	guids, answers       int
	codes                map[string]int
	goodput              int // 0000 answers
	e902p50, e902p99     time.Duration
	breakerOpens         int64
	doubles, e902Posted  int
	maxLimit, spikeLimit int
}

func (r ovResult) e901() int { return r.codes[string(generated.RspReadTimeout)] }

func (r ovResult) report(b *testing.B) {
	b.ReportMetric(100*float64(r.e901())/float64(max(r.guids, 1)), "e901-%guids")
	b.ReportMetric(100*float64(r.e901())/float64(max(r.answers, 1)), "e901-%answers")
	b.ReportMetric(100*float64(r.goodput)/r.cell.served(), "goodput-%cap")
	b.ReportMetric(float64(r.e902p50.Microseconds())/1e3, "e902-p50-ms")
	b.ReportMetric(float64(r.e902p99.Microseconds())/1e3, "e902-p99-ms")
	b.ReportMetric(float64(r.doubles), "double-posts")
	b.ReportMetric(float64(r.e902Posted), "e902-posted")
	b.ReportMetric(float64(r.breakerOpens), "breaker-opens")
	b.Logf("offered %d frames (%d not sent: every connection busy), %d GUIDs, answers by code %v, core capacity over the cell %.0f; limit at most %d, %d at the spike",
		r.offered, r.notSent, r.guids, r.codes, r.cell.served(), r.maxLimit, r.spikeLimit)
}

func printOverloadTable(w io.Writer, rows []ovResult) {
	fmt.Fprintln(w, "| capacity | service | timeout | core | offered | admission | E901 % GUIDs | E901 % answers | goodput % cap | E902 p50 / p99 ms | E500 | breaker opened | posted twice | E902 the core received |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		c := r.cell
		fmt.Fprintf(w, "| %d | %v | %v | %s | %s | %s | %.2f | %.2f | %.1f | %.1f / %.1f | %d | %d | %d | %d |\n",
			c.capacity, c.service, c.timeout, c.kind(), c.loadName(), onOff(c.admission),
			100*float64(r.e901())/float64(max(r.guids, 1)), 100*float64(r.e901())/float64(max(r.answers, 1)),
			100*float64(r.goodput)/c.served(),
			float64(r.e902p50.Microseconds())/1e3, float64(r.e902p99.Microseconds())/1e3,
			r.codes[string(generated.RspHTTP500)], r.breakerOpens, r.doubles, r.e902Posted)
	}
}

// runOverloadCell runs one cell: coresim of the cell's shape in process, a
// relay with its SQLite ledger, the default breaker and (admission on) the
// relay's default limiter, and channels offering the load for the cell's
// length; then it waits for every answer.
func runOverloadCell(b *testing.B, c ovCell) ovResult {
	sim := coresim.New(coresim.Config{MaxConcurrent: c.capacity, RefuseBeyond: c.refuse, Service: c.service,
		Accounts: []coresim.Account{{Bank: "LHB", Acct: acctRich, Balance: 1_000_000_000_000}}})
	core := httptest.NewServer(sim)
	defer core.Close()
	rate := float64(c.load) * c.rate()
	conns := c.conns
	if conns == 0 {
		// Enough for every frame to wait the whole timeout (admission
		// off), within what the machine's descriptors allow.
		conns = min(1500, max(64, int(rate*c.timeout.Seconds()*1.1)+16))
	}
	client, err := corecall.New(corecall.Config{BaseURL: core.URL, Timeout: c.timeout, MaxIdleConns: conns})
	if err != nil {
		b.Fatal(err)
	}
	defer client.CloseIdleConnections()
	led, err := ledger.Open(filepath.Join(b.TempDir(), "relay.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer led.Close()
	br, err := breaker.New(breaker.Settings{Name: "core", Failures: 5, Cooldown: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	var lim *admit.Limiter
	if c.admission {
		if lim, err = admit.New(admit.Settings{Max: admit.DefaultMax, Initial: admit.InitialFor(c.timeout), Timeout: c.timeout}); err != nil {
			b.Fatal(err)
		}
	}
	srv, addr := serveBench(b, Config{Core: client, Ledger: led, MaxConns: conns + 8, MaxConnsPerAddr: conns + 8, Breaker: br, Limiter: lim,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer srv.Close()

	type outcome struct {
		guid string
		code string
		took time.Duration
		at   time.Duration // since the start, when answered
		sent time.Duration // since the start, when sent
	}
	frames := make(chan struct{}, conns)
	results := make(chan outcome, 1<<20)
	var seq atomic.Uint64
	base := uint64(time.Now().UnixNano()) << 16
	var start time.Time
	var wg sync.WaitGroup
	for range conns {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		wg.Go(func() {
			br := bufio.NewReader(conn)
			var answer []byte
			var guid string
			resends := 0
			for range frames {
				if guid == "" {
					guid = fmt.Sprintf("%032x", base+seq.Add(1))
					resends = 0
				}
				f, err := generated.AppendFrame(nil, header(guid, testkit.TransferTx().Code), benchBody)
				if err != nil {
					b.Error(err)
					return
				}
				t0 := time.Now()
				if _, err := conn.Write(f); err != nil {
					b.Error(err)
					return
				}
				if answer, err = wire.ReadFrame(br, answer[:0]); err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				code := string(answer[51:55])
				results <- outcome{guid, code, now.Sub(t0), now.Sub(start), t0.Sub(start)}
				if code == string(generated.RspConnectFail) && resends < 2 {
					resends++ // the same GUID again: nothing was sent
				} else {
					guid = ""
				}
			}
		})
	}

	r := ovResult{cell: c}
	trace := os.Getenv("OVERLOAD_TRACE") != ""
	lastTrace := time.Duration(0)
	sample := func() {
		if lim != nil {
			r.maxLimit = max(r.maxLimit, lim.Limit())
			if el := time.Since(start); trace && el-lastTrace >= 100*time.Millisecond {
				lastTrace = el
				refusedCap, atCore := lim.RefusedCap()
				fmt.Fprintf(os.Stderr, "t=%v limit %d rate %.1f in flight %d at core %d refused cap %d latency %v core serving %d refused %d",
					el.Round(time.Millisecond), lim.Limit(), lim.Rate(), lim.InFlight(), atCore, refusedCap, lim.Latency().Round(time.Millisecond), sim.Serving(), sim.Refused())
				fmt.Fprintln(os.Stderr)
			}
		}
	}
	start = time.Now()
	slowed, restored := false, !c.spike
	tick := time.NewTicker(time.Millisecond)
	for now := range tick.C {
		el := now.Sub(start)
		if el >= c.length {
			break
		}
		sample()
		if c.spike && !slowed && el >= c.length/3 {
			if lim != nil {
				r.spikeLimit = lim.Limit()
			}
			sim.SetService(10 * c.service)
			slowed = true
		}
		if !restored && el >= 2*c.length/3 {
			sim.SetService(c.service)
			restored = true
		}
		for float64(r.offered+r.notSent) < rate*el.Seconds() {
			select {
			case frames <- struct{}{}:
				r.offered++
			default:
				r.notSent++ // every connection busy: the channel could not send
			}
		}
	}
	tick.Stop()
	close(frames)
	wg.Wait()
	close(results)
	srv.Shutdown(b.Context())

	r.codes = map[string]int{}
	var e902 []time.Duration
	sentAnswers := map[string]int{} // answers that say the call was made
	for o := range results {
		r.answers++
		r.codes[o.code]++
		switch o.code {
		case string(generated.RspConnectFail):
			e902 = append(e902, o.took)
			if _, ok := sentAnswers[o.guid]; !ok {
				sentAnswers[o.guid] = 0
			}
		case string(generated.RspHTTP200):
			if o.at <= c.length {
				r.goodput++
			}
			sentAnswers[o.guid]++
		default:
			sentAnswers[o.guid]++
		}
	}
	r.guids = len(sentAnswers)
	calls := sim.Stats().ByGUID
	for guid, n := range sentAnswers {
		if calls[guid] > n {
			r.e902Posted += calls[guid] - n
		}
		if sim.PostCount(guid) > 1 {
			r.doubles++
		}
	}
	slices.Sort(e902)
	if len(e902) > 0 {
		r.e902p50, r.e902p99 = e902[len(e902)/2], e902[min(len(e902)*99/100, len(e902)-1)]
	}
	r.breakerOpens = br.Opens()
	return r
}

// BenchmarkAdmissionCost: what admission costs when the core is not
// overloaded: BenchmarkRelayOverhead's relay/c64 leg (no ledger, a core
// that answers in microseconds) with admission off and on (the relay's
// defaults: at most 256 in flight, starting at 16), alternating, so that
// the two compare neighbours in time. Every transfer must be 0000: a
// frame shed here would fail the run.
//
//	go test -run '^$' -bench AdmissionCost -benchtime 3s -count 3 ./internal/relay/
func BenchmarkAdmissionCost(b *testing.B) {
	core := benchCore(b)
	var seq uint64
	var mu sync.Mutex
	nextGUID := func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		seq++
		return seq % (1 << 16)
	}
	const conc = 64
	for _, on := range []bool{true, false} {
		b.Run(fmt.Sprintf("admission=%s/c%d", map[bool]string{true: "on", false: "off"}[on], conc), func(b *testing.B) {
			var lim *admit.Limiter
			if on {
				var err error
				if lim, err = admit.New(admit.Settings{Max: admit.DefaultMax, Initial: admit.InitialFor(10 * time.Second), Timeout: 10 * time.Second}); err != nil {
					b.Fatal(err)
				}
			}
			srv, addr := serveBench(b, Config{Core: benchClient(b, core.URL, conc), MaxConns: conc + 8, MaxConnsPerAddr: conc + 8, Limiter: lim,
				Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			b.Cleanup(func() { srv.Close() })
			runLoad(b, conc, relayWorkers(b, addr, nextGUID))
			if lim != nil {
				b.ReportMetric(float64(lim.Limit()), "limit")
			}
		})
	}
}
