package relay

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/batch"
	"lhrelay/internal/breaker"
	"lhrelay/internal/corecall"
	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/testkit"
)

// sickCore hangs every request while sick (reading its body first, so that
// the request has certainly arrived), and passes them to the simulator once
// well. It counts the connections made to it.
type sickCore struct {
	sick  atomic.Bool
	sim   *coresim.Server
	conns atomic.Int64
	srv   *httptest.Server
}

func startSickCore(t *testing.T) *sickCore {
	c := &sickCore{sim: simCore(0)}
	c.sick.Store(true)
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.sick.Load() {
			io.Copy(io.Discard, r.Body)
			<-r.Context().Done() // the relay gives up first
			return
		}
		c.sim.ServeHTTP(w, r)
	}))
	c.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			c.conns.Add(1)
		}
	}
	c.srv.Start()
	t.Cleanup(c.srv.Close)
	return c
}

// TestBreakerOpensOnTimeoutsAndAProbeClosesIt: a hanging core, N timeouts
// (E901), then frames answered E902 at once with no connection to the core
// and recorded FAILED/E902; after the cool-down one probe that the core
// answers closes the breaker; reprocess sends each E902 row once.
func TestBreakerOpensOnTimeoutsAndAProbeClosesIt(t *testing.T) {
	const failures = 3
	const cooldown = 2 * time.Second
	const timeout = time.Second
	core := startSickCore(t)
	changes := make(chan breaker.State, 16)
	br, err := breaker.New(breaker.Settings{Name: core.srv.URL, Failures: failures, Cooldown: cooldown, MinCalls: failures,
		OnChange: func(_ string, _, to breaker.State) { changes <- to }})
	assert.NilError(t, err)
	oe := startObserved(t, observed{coreURL: core.srv.URL, metrics: true, more: func(c *envConfig) {
		c.breaker = br
		c.timeout = timeout
	}})

	// N transfers time out together: E901, and the breaker opens.
	var wg sync.WaitGroup
	for range failures {
		wg.Go(func() {
			guid := testkit.GUID()
			assert.Equal(t, oe.roundTrip(transferFrame(t, guid)).code(), string(generated.RspReadTimeout))
			assert.Equal(t, oe.row(guid).State, ledger.StateUnknown)
		})
	}
	wg.Wait()
	assert.Equal(t, <-changes, breaker.Open)
	status, body := oe.get("/readyz")
	assert.Equal(t, status, http.StatusServiceUnavailable, body)
	assert.Assert(t, strings.Contains(body, "breaker open"), body)

	// While open: E902 at once (far sooner than the timeout: the claim's
	// commit is all it waits for), the core not even dialled. The frames go
	// first, the checks after, all well within the cool-down.
	connsBefore := core.conns.Load()
	var refused []string
	for range 5 {
		guid := testkit.GUID()
		start := time.Now()
		a := oe.roundTrip(transferFrame(t, guid))
		took := time.Since(start)
		assert.Equal(t, a.code(), string(generated.RspConnectFail))
		assert.Assert(t, took < timeout/2, "E902 took %v: the call was not refused at once", took)
		refused = append(refused, guid)
	}
	assert.Equal(t, core.conns.Load(), connsBefore, "no connection attempt while open")
	for _, guid := range refused {
		row := oe.row(guid)
		assert.Equal(t, row.State, ledger.StateFailed)
		assert.Equal(t, row.RspCode, string(generated.RspConnectFail))
		assert.Assert(t, strings.Contains(oe.frameLine(guid)["err"].(string), "core breaker open"))
	}
	series := oe.scrape()
	lbl := `{core="` + core.srv.URL + `"}`
	assert.Equal(t, series["lhrelay_core_breaker_state"+lbl], "2")
	assert.Equal(t, series["lhrelay_core_breaker_opens_total"+lbl], "1")
	assert.Equal(t, series["lhrelay_core_breaker_refused_total"+lbl], "5")

	// The core recovers; after the cool-down one probe closes the breaker.
	core.sick.Store(false)
	select {
	case st := <-changes:
		assert.Equal(t, st, breaker.HalfOpen)
	case <-time.After(cooldown + 10*time.Second):
		t.Fatal("the breaker did not go half-open after its cool-down")
	}
	status, _ = oe.get("/readyz")
	assert.Equal(t, status, http.StatusOK, "half-open is ready: the probe needs frames")
	probe := testkit.GUID()
	assert.Equal(t, oe.roundTrip(transferFrame(t, probe)).code(), string(generated.RspHTTP200))
	assert.Equal(t, <-changes, breaker.Closed)
	assert.Equal(t, oe.scrape()["lhrelay_core_breaker_state"+lbl], "0")

	// reprocess sends each refused transfer once.
	oe.srv.WaitRecorded()
	client, err := corecall.New(corecall.Config{BaseURL: core.srv.URL})
	assert.NilError(t, err)
	sum, err := batch.Reprocess(context.Background(), oe.led, client, batch.ReprocessConfig{
		MaxAttempts: 3, Now: time.Now(), Log: slog.New(slog.DiscardHandler),
	})
	assert.NilError(t, err, "summary %v", sum)
	sim := core.sim
	for _, guid := range refused {
		row := oe.row(guid)
		assert.Equal(t, row.State, ledger.StateDone)
		assert.Equal(t, row.RspCode, string(generated.RspHTTP200))
		assert.Equal(t, row.Attempts, 2)
		assert.Equal(t, sim.PostCount(guid), 1, "guid %s", guid)
	}
}

// TestBreakerOpensForOneChannel: a core that accepts connections and never
// answers, one channel sending one transfer at a time, the breaker's
// failure-rate rule at its default (20 calls, out of reach at this pace):
// --breaker-failures timeouts in a row open it (SPEC 5.10), so the next
// transfer is E902 at once, FAILED/E902 and never sent, and /readyz is 503.
func TestBreakerOpensForOneChannel(t *testing.T) {
	const failures = 3
	const timeout = 200 * time.Millisecond
	core := startSickCore(t)
	br, err := breaker.New(breaker.Settings{Name: core.srv.URL, Failures: failures, Cooldown: time.Hour})
	assert.NilError(t, err)
	oe := startObserved(t, observed{coreURL: core.srv.URL, metrics: true, more: func(c *envConfig) {
		c.breaker = br
		c.timeout = timeout
	}})
	for range failures {
		assert.Equal(t, oe.roundTrip(transferFrame(t, testkit.GUID())).code(), string(generated.RspReadTimeout))
	}
	assert.Equal(t, br.State(), breaker.Open)
	assert.Assert(t, strings.Contains(br.Why(), "in a row got no answer"), br.Why())
	status, body := oe.get("/readyz")
	assert.Equal(t, status, http.StatusServiceUnavailable, body)

	connsBefore := core.conns.Load()
	guid := testkit.GUID()
	assert.Equal(t, oe.roundTrip(transferFrame(t, guid)).code(), string(generated.RspConnectFail))
	assert.Equal(t, core.conns.Load(), connsBefore, "nothing sent while open")
	row := oe.row(guid)
	assert.Equal(t, row.State, ledger.StateFailed)
	assert.Equal(t, row.RspCode, string(generated.RspConnectFail))
}

// TestBreakerSlowAmongAnswered: timeouts each followed by an answered call
// never open it, however many, since none is a run (SPEC 5.10: slow calls
// among answered ones never do).
func TestBreakerSlowAmongAnswered(t *testing.T) {
	const timeout = 200 * time.Millisecond
	core := startSickCore(t)
	br, err := breaker.New(breaker.Settings{Name: core.srv.URL, Failures: 2, Cooldown: time.Hour, MinCalls: 1000})
	assert.NilError(t, err)
	e := startEnv(t, envConfig{coreURL: core.srv.URL, ledger: true, breaker: br, timeout: timeout})
	for range 6 {
		core.sick.Store(true)
		assert.Equal(t, e.roundTrip(transferFrame(t, testkit.GUID())).code(), string(generated.RspReadTimeout))
		core.sick.Store(false)
		assert.Equal(t, e.roundTrip(transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP200))
	}
	assert.Equal(t, br.State(), breaker.Closed)
	assert.Equal(t, br.Opens(), int64(0))
}

// Only calls that got no answer count: a core that answers E500 or
// B2xx is a core that is there.
func TestBreakerIgnoresCoreAnswers(t *testing.T) {
	br, err := breaker.New(breaker.Settings{Name: "core", Failures: 2, Cooldown: time.Minute})
	assert.NilError(t, err)
	e := startEnv(t, envConfig{core: reply(http.StatusInternalServerError, ``), ledger: true, breaker: br})
	for range 5 {
		assert.Equal(t, e.roundTrip(transferFrame(t, testkit.GUID())).code(), string(generated.RspHTTP500))
	}
	assert.Equal(t, br.State(), breaker.Closed)
	assert.Equal(t, br.Opens(), int64(0))
}

// Refused connections open it too, and a probe that still cannot connect
// opens it again.
func TestBreakerConnectFailures(t *testing.T) {
	changes := make(chan breaker.State, 16)
	br, err := breaker.New(breaker.Settings{Name: "core", Failures: 2, Cooldown: 50 * time.Millisecond,
		OnChange: func(_ string, _, to breaker.State) { changes <- to }})
	assert.NilError(t, err)
	e := startEnv(t, envConfig{coreURL: testkit.ClosedURL(t), ledger: true, breaker: br})
	for range 2 {
		assert.Equal(t, e.roundTrip(transferFrame(t, testkit.GUID())).code(), string(generated.RspConnectFail))
	}
	assert.Equal(t, <-changes, breaker.Open)
	assert.Equal(t, <-changes, breaker.HalfOpen)
	guid := testkit.GUID()
	assert.Equal(t, e.roundTrip(transferFrame(t, guid)).code(), string(generated.RspConnectFail))
	assert.Equal(t, <-changes, breaker.Open)
	assert.Equal(t, br.Opens(), int64(2))
	assert.Equal(t, e.row(guid).State, ledger.StateFailed)
}
