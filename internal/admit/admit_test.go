package admit_test

import (
	"errors"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/admit"
)

func TestNew(t *testing.T) {
	l, err := admit.New(admit.Settings{Max: 0, Timeout: time.Second})
	assert.NilError(t, err)
	assert.Assert(t, l == nil, "max 0: no limiter")
	p, err := l.Acquire()
	assert.NilError(t, err, "a nil limiter admits every call")
	p.Done(admit.Answered, 0)

	_, err = admit.New(admit.Settings{Max: -1, Timeout: time.Second})
	assert.ErrorContains(t, err, "negative")
	_, err = admit.New(admit.Settings{Max: 4})
	assert.ErrorContains(t, err, "timeout")
}

// The limit bounds the calls in flight; a call over it waits at most
// MaxWait and is shed (ReasonLimit); a slot freed while it waits is
// handed to it.
func TestBoundAndWait(t *testing.T) {
	l, err := admit.New(admit.Settings{Max: 2, Fixed: true, Timeout: time.Second, MaxWait: time.Millisecond})
	assert.NilError(t, err)
	a, err := l.Acquire()
	assert.NilError(t, err)
	b, err := l.Acquire()
	assert.NilError(t, err)
	assert.Equal(t, l.InFlight(), 2)

	_, err = l.Acquire()
	var se *admit.ShedError
	assert.Assert(t, errors.As(err, &se), "err %v", err)
	assert.Equal(t, se.Reason, admit.ReasonLimit)
	assert.Assert(t, errors.Is(err, admit.ErrShed))
	assert.Assert(t, se.Waited >= time.Millisecond)

	// A waiter gets the slot freed while it waits.
	long, err := admit.New(admit.Settings{Max: 1, Fixed: true, Timeout: time.Second, MaxWait: time.Minute})
	assert.NilError(t, err)
	first, err := long.Acquire()
	assert.NilError(t, err)
	got := make(chan error, 1)
	go func() {
		p, err := long.Acquire()
		if err == nil {
			p.Done(admit.Ignored, 0)
		}
		got <- err
	}()
	first.Done(admit.Answered, 0)
	assert.NilError(t, <-got)
	a.Done(admit.Answered, 0)
	b.Done(admit.Ignored, 0)
	assert.Equal(t, l.InFlight(), 0)
}

// A core whose calls time out: the recent latency reaches the timeout and
// further calls are shed (ReasonDeadline) while one is in flight; with
// none in flight one is let through as a probe.
func TestDeadline(t *testing.T) {
	l, err := admit.New(admit.Settings{Max: 8, Fixed: true, Timeout: 10 * time.Millisecond})
	assert.NilError(t, err)
	for l.Latency() < 10*time.Millisecond {
		p, err := l.Acquire()
		assert.NilError(t, err)
		p.Done(admit.TimedOut, 0)
	}
	probe, err := l.Acquire()
	assert.NilError(t, err, "nothing in flight: a probe")
	_, err = l.Acquire()
	var se *admit.ShedError
	assert.Assert(t, errors.As(err, &se), "err %v", err)
	assert.Equal(t, se.Reason, admit.ReasonDeadline)
	probe.Done(admit.Ignored, 0)
}

// The limit shrinks while calls take longer than half the timeout, grows
// back while they are fast and the limit is in use, and stays within
// [1, Max].
func TestLimitAdapts(t *testing.T) {
	l, err := admit.New(admit.Settings{Max: 64, Initial: 32, Timeout: time.Hour})
	assert.NilError(t, err)
	// Calls that take the whole timeout, at the limit.
	for range 200 {
		ps := make([]admit.Permit, 0, l.Limit())
		for range l.Limit() {
			p, err := l.Acquire()
			if err != nil {
				break
			}
			ps = append(ps, p)
		}
		for _, p := range ps {
			p.Done(admit.TimedOut, 0)
		}
	}
	assert.Equal(t, l.Limit(), 1)
	for range 200 {
		ps := make([]admit.Permit, 0, l.Limit())
		for range l.Limit() {
			p, err := l.Acquire()
			assert.NilError(t, err)
			ps = append(ps, p)
		}
		for _, p := range ps {
			p.Done(admit.Answered, time.Microsecond)
		}
	}
	assert.Equal(t, l.Limit(), 64)
}

// A call the core refused (503 or 429) while ten were in flight caps the
// limit below ten: the core served nine at most.
func TestRefusedCapsTheLimit(t *testing.T) {
	l, err := admit.New(admit.Settings{Max: 64, Initial: 32, Timeout: time.Second})
	assert.NilError(t, err)
	ps := make([]admit.Permit, 10)
	for i := range ps {
		ps[i], err = l.Acquire()
		assert.NilError(t, err)
	}
	ps[9].Done(admit.Refused, time.Millisecond)
	assert.Assert(t, l.Limit() <= 9, "limit %d after a refusal with 10 in flight", l.Limit())
	for _, p := range ps[:9] {
		p.Done(admit.Answered, time.Millisecond)
	}
	assert.Assert(t, l.Limit() <= 9, "limit %d grew past the refusal's cap within a second", l.Limit())
}

// The start: the limit is Initial, and it grows by no more than what the
// measured rate finishes within 3/4 of the timeout: eight calls answered
// after 300 ms with a 1 s timeout allow 8·0.75/0.3 = 20, not Max.
func TestStartGrowsByTheRate(t *testing.T) {
	l, err := admit.New(admit.Settings{Max: 256, Initial: admit.InitialFor(time.Second), Timeout: time.Second})
	assert.NilError(t, err)
	assert.Equal(t, l.Limit(), 8)
	ps := make([]admit.Permit, 8)
	for i := range ps {
		ps[i], err = l.Acquire()
		assert.NilError(t, err)
	}
	for _, p := range ps {
		p.Done(admit.Answered, 300*time.Millisecond)
	}
	assert.Assert(t, l.Limit() > 8 && l.Limit() <= 20, "limit %d", l.Limit())
}
