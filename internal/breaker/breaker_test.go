package breaker_test

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/breaker"
)

func TestNew(t *testing.T) {
	b, err := breaker.New(breaker.Settings{Name: "core", Failures: 0, Cooldown: time.Second})
	assert.NilError(t, err)
	assert.Assert(t, b == nil, "0 failures: no breaker")
	done, err := b.Allow()
	assert.NilError(t, err, "a nil breaker lets every call through")
	done(breaker.Failure)
	assert.Equal(t, b.State(), breaker.Closed)

	_, err = breaker.New(breaker.Settings{Failures: -1, Cooldown: time.Second})
	assert.ErrorContains(t, err, "negative")
	_, err = breaker.New(breaker.Settings{Failures: 3})
	assert.ErrorContains(t, err, "cool-down")
}

// Calls in a row with no answer open it, whether they could not connect
// or timed out, mixed in any order; an answered call between them starts
// the run again; excluded calls do not count; a refused call is counted.
// The rate rule is kept out of reach (MinCalls 100).
func TestCounting(t *testing.T) {
	b, err := breaker.New(breaker.Settings{Name: "core", Failures: 3, Cooldown: time.Hour, MinCalls: 100})
	assert.NilError(t, err)
	call := func(v breaker.Verdict) {
		t.Helper()
		done, err := b.Allow()
		assert.NilError(t, err)
		done(v)
	}
	call(breaker.ConnectFailure)
	call(breaker.ConnectFailure)
	call(breaker.Success)
	call(breaker.Failure)
	call(breaker.Failure)
	call(breaker.Success)
	call(breaker.Failure)
	call(breaker.ConnectFailure)
	call(breaker.Excluded)
	assert.Equal(t, b.State(), breaker.Closed)
	call(breaker.Failure)
	assert.Equal(t, b.State(), breaker.Open)
	assert.Equal(t, b.Opens(), int64(1))
	_, err = b.Allow()
	assert.ErrorIs(t, err, breaker.ErrOpen)
	assert.Equal(t, b.Refused(), int64(1))
}

// Half-open lets one probe through at a time.
func TestOneProbeAtATime(t *testing.T) {
	changes := make(chan breaker.State, 8)
	b, err := breaker.New(breaker.Settings{Name: "core", Failures: 1, Cooldown: 10 * time.Millisecond,
		OnChange: func(_ string, _, to breaker.State) { changes <- to }})
	assert.NilError(t, err)
	done, err := b.Allow()
	assert.NilError(t, err)
	done(breaker.ConnectFailure)
	assert.Equal(t, <-changes, breaker.Open)
	assert.Equal(t, <-changes, breaker.HalfOpen) // the timer's doing
	probe, err := b.Allow()
	assert.NilError(t, err)
	_, err = b.Allow()
	assert.ErrorIs(t, err, breaker.ErrOpen, "a second call while the probe is out")
	probe(breaker.Success)
	assert.Equal(t, <-changes, breaker.Closed)
}

// The failure rate, with the run rule out of reach (Failures 100): timeouts
// among enough answered calls leave it closed; a window where the rate is
// reached with the minimum number of calls opens it, and its error says
// which rule did.
func TestFailureRate(t *testing.T) {
	b, err := breaker.New(breaker.Settings{Name: "core", Failures: 100, Cooldown: time.Hour, Window: time.Hour, MinCalls: 10, Rate: 0.5})
	assert.NilError(t, err)
	call := func(v breaker.Verdict) {
		t.Helper()
		done, err := b.Allow()
		assert.NilError(t, err)
		done(v)
	}
	for range 12 {
		call(breaker.Success)
	}
	for range 11 {
		call(breaker.Failure)
	}
	assert.Equal(t, b.State(), breaker.Closed, "11 timeouts among 23 calls: under half")
	call(breaker.Failure)
	assert.Equal(t, b.State(), breaker.Open, "12 of 24 failed")
	_, err = b.Allow()
	assert.ErrorContains(t, err, "12 of the last 24 calls")

	few, err := breaker.New(breaker.Settings{Name: "core", Failures: 100, Cooldown: time.Hour, Window: time.Hour, MinCalls: 10})
	assert.NilError(t, err)
	for range 9 {
		done, err := few.Allow()
		assert.NilError(t, err)
		done(breaker.Failure)
	}
	assert.Equal(t, few.State(), breaker.Closed, "9 timeouts: under the minimum number of calls")

	_, err = breaker.New(breaker.Settings{Failures: 3, Cooldown: time.Second, Rate: 1.5})
	assert.ErrorContains(t, err, "rate")
}

// A call that fails after the core answered another one sent later is a
// slow call among answered ones: it counts in neither rule (here the rate
// rule would open at 2 failures in 4 calls). Calls sent after the last
// answer do, however they overlap.
func TestRunCountsOnlyCallsSentSinceTheLastAnswer(t *testing.T) {
	b, err := breaker.New(breaker.Settings{Name: "core", Failures: 2, Cooldown: time.Hour, Window: time.Hour, MinCalls: 2, Rate: 0.5})
	assert.NilError(t, err)
	allow := func() func(breaker.Verdict) {
		t.Helper()
		done, err := b.Allow()
		assert.NilError(t, err)
		return done
	}
	slow1, slow2, slow3 := allow(), allow(), allow()
	allow()(breaker.Success) // answered while the slow ones wait
	slow1(breaker.Failure)
	slow2(breaker.Failure)
	slow3(breaker.ConnectFailure)
	assert.Equal(t, b.State(), breaker.Closed, "three slow calls among answered ones")

	hung1, hung2 := allow(), allow()
	hung1(breaker.Failure)
	hung2(breaker.Failure)
	assert.Equal(t, b.State(), breaker.Open, "two calls sent since the last answer, neither answered")
}
