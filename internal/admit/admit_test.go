package admit_test

import (
	"errors"
	"runtime"
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

// A call the core refused (503 or 429) while ten were at the core caps
// the limit at the nine the core served and one ready to go: the core
// served nine at most.
func TestRefusedCapsTheLimit(t *testing.T) {
	l, err := admit.New(admit.Settings{Max: 64, Initial: 32, Timeout: time.Second})
	assert.NilError(t, err)
	ps := make([]admit.Permit, 10)
	for i := range ps {
		ps[i], err = l.Acquire()
		assert.NilError(t, err)
		ps[i].Sending()
	}
	ps[9].Done(admit.Refused, time.Millisecond)
	assert.Assert(t, l.Limit() <= 10, "limit %d after a refusal with 10 at the core", l.Limit())
	for _, p := range ps[:9] {
		p.Done(admit.Answered, time.Millisecond)
	}
	assert.Assert(t, l.Limit() <= 10, "limit %d grew past the refusal's cap within a second", l.Limit())
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

// A refusing core's capacity is the calls at the core when a call was
// refused, not the slots: a relay's slot holds the claim's commit before
// the call, and capping the slots at the core's capacity would leave the
// core idle for that share of every call. Calls of 10 ms after 3 ms in
// the claim: a core of 4 takes 4·13/10 slots, and one more waits ready,
// 7. A call marked at the core as soon as it is admitted (a batch run's)
// takes 4 and one more.
func TestRefusedCapCountsCallsAtTheCore(t *testing.T) {
	for _, tc := range []struct {
		name  string
		claim time.Duration
		want  int
	}{
		{"a relay's slots, 3 ms in the claim", 3 * time.Millisecond, 7},
		{"calls sent at once", 0, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := admit.New(admit.Settings{Max: 64, Initial: 8, Timeout: time.Second})
			assert.NilError(t, err)
			now := time.Now()
			admit.SetClock(l, func() time.Time { return now })
			// call runs n calls of 10 ms together, each after the claim;
			// the last one's answer is refused when refuse.
			call := func(n int, refuse bool) {
				ps := make([]admit.Permit, n)
				for i := range ps {
					ps[i], err = l.Acquire()
					assert.NilError(t, err)
				}
				now = now.Add(tc.claim)
				for i := range ps {
					ps[i].Sending()
				}
				now = now.Add(10 * time.Millisecond)
				if refuse {
					ps[n-1].Done(admit.Refused, 0)
					ps = ps[:n-1]
				}
				for _, p := range ps {
					p.Done(admit.Answered, 10*time.Millisecond)
				}
			}
			for range 10 {
				call(4, false)
			}
			assert.Assert(t, l.Limit() > tc.want, "limit %d before any refusal", l.Limit())
			call(5, true) // five at the core: the fifth refused
			assert.Equal(t, l.Limit(), tc.want)
			for range 10 {
				call(4, false)
			}
			assert.Equal(t, l.Limit(), tc.want, "the cap holds within a second")
		})
	}
}

// A call sent while few calls were at the core can reach it after calls
// sent later (it waited for a new connection): refused, it shows the core
// full of those. Its refusal counts the calls at the core when it is
// back, not only those when it was sent, so that the cap is not a third
// of the core: ten at the core when the refusal is back, nine served.
func TestRefusedCountsTheCallsAtTheCoreWhenItIsBack(t *testing.T) {
	l, err := admit.New(admit.Settings{Max: 64, Initial: 32, Timeout: time.Second})
	assert.NilError(t, err)
	now := time.Now()
	admit.SetClock(l, func() time.Time { return now })
	ps := make([]admit.Permit, 10)
	for i := range ps {
		ps[i], err = l.Acquire()
		assert.NilError(t, err)
	}
	ps[0].Sending() // alone at the core when sent
	for _, p := range ps[1:] {
		p.Sending()
	}
	now = now.Add(time.Millisecond)
	ps[0].Done(admit.Refused, time.Millisecond)
	refusedCap, atCore := l.RefusedCap()
	assert.Equal(t, atCore, 9)
	assert.Equal(t, refusedCap, 9, "the nine at the core when the refusal came back")
	for _, p := range ps[1:] {
		p.Done(admit.Answered, 10*time.Millisecond)
	}
}

// After a refusal no more calls go to the core than it showed it serves:
// a call over that waits in Sending until one at the core ends.
func TestSendingWaitsForTheCore(t *testing.T) {
	l, err := admit.New(admit.Settings{Max: 64, Initial: 8, Timeout: time.Hour})
	assert.NilError(t, err)
	now := time.Now()
	admit.SetClock(l, func() time.Time { return now })
	const took = time.Minute // the gate's longest wait: no test waits it out
	ps := make([]admit.Permit, 3)
	for i := range ps {
		ps[i], err = l.Acquire()
		assert.NilError(t, err)
		ps[i].Sending()
	}
	now = now.Add(took)
	ps[2].Done(admit.Refused, 0) // three at the core: it serves two
	for _, p := range ps[:2] {
		p.Done(admit.Answered, took)
	}
	assert.Equal(t, l.Limit(), 3, "two at the core and one ready")

	ps = ps[:3]
	for i := range ps {
		ps[i], err = l.Acquire()
		assert.NilError(t, err)
	}
	ps[0].Sending()
	ps[1].Sending()
	sent := make(chan struct{})
	go func() {
		ps[2].Sending()
		close(sent)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for admit.GateLen(l) == 0 {
		assert.Assert(t, time.Now().Before(deadline), "the third call never waited")
		runtime.Gosched()
	}
	select {
	case <-sent:
		t.Fatal("a third call went to a core that serves two")
	default:
	}
	ps[0].Done(admit.Answered, took)
	<-sent
	ps[1].Done(admit.Answered, took)
	ps[2].Done(admit.Answered, took)
	assert.Equal(t, l.InFlight(), 0)
}
