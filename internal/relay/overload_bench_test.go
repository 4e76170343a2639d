package relay

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
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
// 600 channel connections sending a new GUID each time (no resends), for
// 9 s: 3 s normal, 3 s with the core's latency raised tenfold (capacity
// 10/s), 3 s normal again. The relay has its SQLite ledger, --timeout 1 and
// the default breaker; each load runs with admission on (the default
// limiter) and off, one after the other, so the two compare on the same
// machine within minutes.
//
// Each sub-benchmark reports: E901 as a share of GUIDs (e901-%guids; every
// frame is a new GUID, so it is also the share of answers), goodput (0000
// answers) as a share of the core's capacity over the run (goodput-%cap),
// the p50 and p99 answer time of E902 (e902-p50-ms, e902-p99-ms), transfers
// posted more than once (double-posts, must be 0), E902 answers for a
// transfer the core received (e902-posted, must be 0) and breaker openings.
// One iteration is one 9 s run: use -benchtime 1x.
//
//	go test -run '^$' -bench Overload -benchtime 1x -v ./internal/relay/
func BenchmarkOverload(b *testing.B) {
	for _, load := range []int{2, 5} {
		for _, on := range []bool{true, false} {
			name := fmt.Sprintf("load=%dx/admission=%s", load, map[bool]string{true: "on", false: "off"}[on])
			b.Run(name, func(b *testing.B) {
				for range b.N {
					runOverload(b, load, on)
				}
			})
		}
	}
}

const (
	ovCapacity = 4
	ovService  = 40 * time.Millisecond
	ovTimeout  = time.Second
	ovPhase    = 3 * time.Second
	ovConns    = 600
)

func runOverload(b *testing.B, load int, admission bool) {
	sim := coresim.New(coresim.Config{MaxConcurrent: ovCapacity, Service: ovService,
		Accounts: []coresim.Account{{Bank: "LHB", Acct: acctRich, Balance: 1_000_000_000_000}}})
	core := httptest.NewServer(sim)
	defer core.Close()
	client, err := corecall.New(corecall.Config{BaseURL: core.URL, Timeout: ovTimeout, MaxIdleConns: ovConns})
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
	if admission {
		if lim, err = admit.New(admit.Settings{Max: 256, Initial: 16, Timeout: ovTimeout}); err != nil {
			b.Fatal(err)
		}
	}
	srv, addr := serveBench(b, Config{Core: client, Ledger: led, MaxConns: ovConns + 8, MaxConnsPerAddr: ovConns + 8, Breaker: br, Limiter: lim,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer srv.Close()

	type outcome struct {
		guid string
		code string
		took time.Duration
	}
	rate := float64(load) * ovCapacity / ovService.Seconds()
	frames := make(chan string, ovConns)
	results := make(chan outcome, 1<<16)
	var wg sync.WaitGroup
	for range ovConns {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		wg.Go(func() {
			var answer []byte
			for guid := range frames {
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
				if answer, err = wire.ReadFrame(conn, answer[:0]); err != nil {
					b.Error(err)
					return
				}
				results <- outcome{guid, string(answer[51:55]), time.Since(t0)}
			}
		})
	}

	b.ResetTimer()
	start := time.Now()
	var seq uint64
	var offered, dropped int
	slowed, restored := false, false
	tick := time.NewTicker(time.Millisecond)
	for now := range tick.C {
		el := now.Sub(start)
		if el >= 3*ovPhase {
			break
		}
		if !slowed && el >= ovPhase {
			sim.SetService(10 * ovService)
			slowed = true
		}
		if !restored && el >= 2*ovPhase {
			sim.SetService(ovService)
			restored = true
		}
		for float64(offered+dropped) < rate*el.Seconds() {
			seq++
			select {
			case frames <- fmt.Sprintf("%016x%016x", uint64(load), seq+uint64(time.Now().UnixNano())<<20):
				offered++
			default:
				dropped++ // every connection busy: the channel could not send
			}
		}
	}
	tick.Stop()
	close(frames)
	wg.Wait()
	b.StopTimer()
	close(results)
	srv.Shutdown(b.Context())

	codes := map[string]int{}
	var e902 []time.Duration
	e902Posted := 0
	for r := range results {
		codes[r.code]++
		if r.code == string(generated.RspConnectFail) {
			e902 = append(e902, r.took)
			if sim.PostCount(r.guid) > 0 {
				e902Posted++
			}
		}
	}
	doubles := 0
	for _, n := range sim.Stats().ByGUID {
		if n > 1 {
			doubles++
		}
	}
	answers := 0
	for _, n := range codes {
		answers += n
	}
	capacity := (2*ovPhase.Seconds() + ovPhase.Seconds()/10) * ovCapacity / ovService.Seconds()
	slices.Sort(e902)
	pct := func(p int) float64 {
		if len(e902) == 0 {
			return 0
		}
		return float64(e902[min(len(e902)*p/100, len(e902)-1)].Microseconds()) / 1e3
	}
	b.ReportMetric(100*float64(codes[string(generated.RspReadTimeout)])/float64(max(answers, 1)), "e901-%guids")
	b.ReportMetric(100*float64(codes[string(generated.RspHTTP200)])/capacity, "goodput-%cap")
	b.ReportMetric(pct(50), "e902-p50-ms")
	b.ReportMetric(pct(99), "e902-p99-ms")
	b.ReportMetric(float64(doubles), "double-posts")
	b.ReportMetric(float64(e902Posted), "e902-posted")
	b.ReportMetric(float64(br.Opens()), "breaker-opens")
	b.Logf("offered %d frames (%d more found every connection busy), answers by code %v, capacity %.0f", offered, dropped, codes, capacity)
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
				if lim, err = admit.New(admit.Settings{Max: 256, Initial: 16, Timeout: 10 * time.Second}); err != nil {
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
