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

// Failures in a row open it; a success between them starts the count
// again; excluded calls do not count; a refused call is counted.
func TestCounting(t *testing.T) {
	b, err := breaker.New(breaker.Settings{Name: "core", Failures: 3, Cooldown: time.Hour})
	assert.NilError(t, err)
	call := func(v breaker.Verdict) {
		t.Helper()
		done, err := b.Allow()
		assert.NilError(t, err)
		done(v)
	}
	call(breaker.Failure)
	call(breaker.Failure)
	call(breaker.Success)
	call(breaker.Failure)
	call(breaker.Failure)
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
	done(breaker.Failure)
	assert.Equal(t, <-changes, breaker.Open)
	assert.Equal(t, <-changes, breaker.HalfOpen) // the timer's doing
	probe, err := b.Allow()
	assert.NilError(t, err)
	_, err = b.Allow()
	assert.ErrorIs(t, err, breaker.ErrOpen, "a second call while the probe is out")
	probe(breaker.Success)
	assert.Equal(t, <-changes, breaker.Closed)
}
