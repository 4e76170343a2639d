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

// Connection failures in a row open it; a success or a timeout (it
// connected) between them starts the run again; excluded calls do not
// count; a refused call is counted.
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
	call(breaker.ConnectFailure)
	call(breaker.ConnectFailure)
	call(breaker.Failure)
	call(breaker.ConnectFailure)
	call(breaker.ConnectFailure)
	call(breaker.Excluded)
	assert.Equal(t, b.State(), breaker.Closed)
	call(breaker.ConnectFailure)
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

// Timeouts count towards the failure rate only: any number of them in a
// row among enough answered calls leaves it closed; a window where the
// rate is reached with the minimum number of calls opens it, and its
// error says which rule did.
func TestFailureRate(t *testing.T) {
	b, err := breaker.New(breaker.Settings{Name: "core", Failures: 3, Cooldown: time.Hour, Window: time.Hour, MinCalls: 10, Rate: 0.5})
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
	assert.Equal(t, b.State(), breaker.Closed, "11 timeouts in a row among 23 calls: under half")
	call(breaker.Failure)
	assert.Equal(t, b.State(), breaker.Open, "12 of 24 failed")
	_, err = b.Allow()
	assert.ErrorContains(t, err, "12 of the last 24 calls")

	few, err := breaker.New(breaker.Settings{Name: "core", Failures: 3, Cooldown: time.Hour, Window: time.Hour, MinCalls: 10})
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
