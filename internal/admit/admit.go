// Package admit bounds the calls the relay has in flight to a core and
// admits a call only when it can still finish within the call's timeout
// (SPEC §5.12).
//
// # Why a bound at all
//
// A core serves a fixed number of requests at once and queues the rest.
// Sending it everything means the queue grows until requests wait longer
// than --timeout, and each of those becomes E901: sent, result unknown, a
// transfer somebody must settle by hand. A frame refused before anything
// is sent is E902 instead, which the channel may simply resend. So the
// limiter trades unknowns for refusals: it keeps the core busy at its
// capacity and refuses (sheds) what the core could not finish in time.
//
// # The limit
//
// The limit adapts between 1 and Settings.Max (--max-inflight) to the
// latency of the calls it admitted. A call's latency is the core's own
// time plus its wait in the core's queue, and the queue is made of the
// calls we sent beyond the core's capacity. The limit aims at a latency
// of twice the core's latency without a queue (the baseline), never more
// than half the call timeout and never less than a twentieth of it (a
// core that fast is no risk: ten times slower, its calls still finish
// within half the timeout; and the limit must not throttle a fast core
// whose latency is mostly our own CPU's): a queue about as long as the core's
// capacity keeps the core busy, and calls in flight then finish within
// the timeout even if the core slows down several times over at once (a
// limit aimed at the timeout alone lets the queue grow until a tenfold
// slowdown turns every call in flight into E901).
//
// The baseline is the lowest latency seen over the last 5 to 10 seconds
// (two buckets of 5 s), so that a core that stays slow is taken at its new
// speed within seconds. Under constant overload every call queues, and a
// lowest latency taken only from queued calls would creep up window after
// window; so when a bucket starts, the limit is halved for one round of
// calls, the core's queue drains, and the new bucket sees calls that did
// not queue (BBR's "probe RTT").
//
// The recent latency is a moving average (EWMA) of the calls' latencies,
// each counted at most at twice the average so far: queueing moves every
// call, and the average follows it within a few dozen calls (a tenfold
// rise in about 25), while a few individually slow transfers among fast
// ones (a burst of them, even timing out) barely move it, and must not
// make the relay shed the fast ones. Each finished call moves the limit
// towards limit × target / latency, by a small step (gain) and by at most
// a factor of two: a core that answers within the target lets the limit
// grow (only while the limit is in use: an idle limit proves nothing),
// one that answers past it shrinks it in proportion. A call that timed
// out counts as taking the whole timeout. While the recent latency is
// under half the floor (a fortieth of the timeout) the limit also grows by
// every call waiting: a fast core must not see frames shed while the
// limit climbs from its start.
//
// This is Netflix's gradient idea (limit × ratio of latencies) with the
// call timeout as the bound that matters to us on top of the lowest
// latency.
//
// # Admission
//
// Acquire takes a slot at once if the calls in flight are under the
// limit, or waits for one, first come first served, at most MaxWait. It
// refuses (sheds) when no slot came within MaxWait (ReasonLimit), or when
// the recent latency plus the wait already taken leaves no room within the
// timeout (ReasonDeadline: the call would most likely become E901). With
// nothing in flight a call is always admitted, as a probe: without calls
// the limiter would never learn that the core got fast again.
//
// Until the first call has come back, the wait is up to the floor (a
// twentieth of the timeout) instead: the core's speed is unknown, and a
// start-up burst that the first answers would let in is not shed.
//
// The wait is short (milliseconds) on purpose: a shed frame is answered
// at once, and a frame that waits long would only eat into the channel's
// own timeout. The limit, not the queue, is what keeps goodput up: under
// overload a slot freed is taken within microseconds by a waiting frame.
//
// # Not a library
//
// failsafe-go's adaptivelimiter and platinummonkey/go-concurrency-limits
// were read and not taken: both adapt to the lowest latency seen (Vegas,
// gradient) with no notion of a call deadline, so a core whose latency
// rises without queueing is throttled for no gain, and neither refuses a
// call because it could no longer finish within its timeout. The rule we
// need is a few dozen lines; the libraries bring a policy framework
// (failsafe-go) or an unmaintained one (go-concurrency-limits) with them.
package admit

import (
	"container/list"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Reason says why a call was shed.
type Reason string

// The reasons a call is shed; they are the label values in /metrics.
const (
	// ReasonLimit: no slot became free within MaxWait.
	ReasonLimit Reason = "limit"
	// ReasonDeadline: the core's recent latency plus the wait leaves no
	// room to finish within the timeout.
	ReasonDeadline Reason = "deadline"
)

// Reasons lists every Reason (for metrics that export each at zero).
var Reasons = []Reason{ReasonLimit, ReasonDeadline}

// ShedError is the error of a call that was not admitted. Nothing may be
// sent.
type ShedError struct {
	Reason Reason
	Waited time.Duration
	Limit  int
	// Latency is the recent latency the decision was made with.
	Latency time.Duration
}

func (e *ShedError) Error() string {
	return fmt.Sprintf("core call not admitted (%s): %d calls in flight at the limit, waited %v, recent core latency %v; nothing sent",
		e.Reason, e.Limit, e.Waited.Round(time.Microsecond), e.Latency.Round(time.Millisecond))
}

// ErrShed matches every *ShedError.
var ErrShed = errors.New("core call not admitted")

// Is lets errors.Is(err, ErrShed) match.
func (e *ShedError) Is(target error) bool { return target == ErrShed }

// Settings configure a Limiter.
type Settings struct {
	// Max is the most calls in flight at once (--max-inflight). New
	// returns nil (no limiter) for 0.
	Max int
	// Initial is the limit to start from; 0 means Max.
	Initial int
	// Timeout is the call's own bound (--timeout): a call that takes
	// longer is E901. Required.
	Timeout time.Duration
	// MaxWait is the longest a call waits for a slot before it is shed;
	// 0 means DefaultMaxWait.
	MaxWait time.Duration
	// Fixed keeps the limit at Max: no adaptation, only the bound and the
	// deadline rule.
	Fixed bool
}

// The relay's defaults for Settings.Max (--max-inflight) and
// Settings.Initial.
const (
	DefaultMax     = 256
	DefaultInitial = 16
)

// DefaultMaxWait is short enough that a shed frame is answered within a
// few milliseconds, and long enough to take a slot that frees meanwhile
// under overload (then slots free every few milliseconds or faster).
const DefaultMaxWait = 2 * time.Millisecond

const (
	// gain is how far one finished call moves the limit towards its
	// proposal: about twenty calls to get most of the way.
	gain = 0.05
	// alpha is the weight of one call in the moving average.
	alpha = 0.1
	// tolerance is the latency aimed at, in baselines.
	tolerance = 2
	// baseWindow is the length of one of the baseline's two buckets.
	baseWindow = 5 * time.Second
	// outlier caps one call's latency at this many times the average, so
	// that a few slow calls do not look like queueing.
	outlier = 2
)

// Limiter admits calls to one core. A nil *Limiter admits every call at
// once. It is safe for concurrent use.
type Limiter struct {
	max     int
	timeout time.Duration
	target  time.Duration // the most latency aimed at: half the timeout
	floor   time.Duration // the least: a twentieth of the timeout
	maxWait time.Duration
	fixed   bool

	mu       sync.Mutex
	limit    float64
	inFlight int
	latency  float64    // moving average, in seconds; 0 until the first call
	waiters  *list.List // of *waiter, oldest first
	// The baseline: the lowest latency of the current bucket and of the
	// one before (0: none yet), and when the current one started.
	curMin, prevMin float64
	bucketStart     time.Time
	// draining counts down the calls of a round with the limit halved,
	// after a bucket started.
	draining int

	// Mirrors for the metrics' reads, which must not take mu.
	inFlightN atomic.Int64
	limitN    atomic.Int64
}

type waiter struct {
	ready   chan struct{} // closed when granted
	granted bool          // under mu
}

// New returns a limiter, or nil when s.Max is 0 (off).
func New(s Settings) (*Limiter, error) {
	if s.Max < 0 || s.Initial < 0 || s.MaxWait < 0 {
		return nil, fmt.Errorf("admit: negative max (%d), initial (%d) or wait (%v)", s.Max, s.Initial, s.MaxWait)
	}
	if s.Max == 0 {
		return nil, nil
	}
	if s.Timeout <= 0 {
		return nil, errors.New("admit: a limiter needs the call timeout")
	}
	l := &Limiter{
		max:         s.Max,
		timeout:     s.Timeout,
		target:      s.Timeout / 2,
		floor:       s.Timeout / 20,
		maxWait:     s.MaxWait,
		fixed:       s.Fixed,
		waiters:     list.New(),
		bucketStart: time.Now(),
	}
	if l.maxWait == 0 {
		l.maxWait = DefaultMaxWait
	}
	l.limit = float64(min(s.Max, max(s.Initial, 1)))
	if s.Initial == 0 || s.Fixed {
		l.limit = float64(s.Max)
	}
	l.limitN.Store(int64(l.limit))
	return l, nil
}

// Permit is an admitted call. Done must be called exactly once.
type Permit struct {
	l *Limiter
	// Waited is how long the call waited for its slot.
	Waited time.Duration
}

// Sample is what a finished call tells the limiter.
type Sample int

const (
	// Ignored: the call says nothing about the core's latency (it was
	// not made, it could not connect, or a stopping relay cut it short).
	Ignored Sample = iota
	// Answered: the core answered; its latency counts.
	Answered
	// TimedOut: the call took the whole timeout.
	TimedOut
)

// Acquire admits one call or sheds it. The returned error is a
// *ShedError (matching ErrShed) when the call is shed; then nothing may
// be sent.
func (l *Limiter) Acquire() (Permit, error) {
	if l == nil {
		return Permit{}, nil
	}
	start := time.Now()
	l.mu.Lock()
	if err := l.deadlineLocked(0); err != nil {
		l.mu.Unlock()
		return Permit{}, err
	}
	if l.waiters.Len() == 0 && l.inFlight < l.slotsLocked() {
		l.takeLocked()
		l.mu.Unlock()
		return Permit{l: l}, nil
	}
	w := &waiter{ready: make(chan struct{})}
	e := l.waiters.PushBack(w)
	wait := l.maxWait
	if l.latency == 0 {
		// No call has come back yet: how fast the core is is unknown,
		// and shedding a start-up burst that the first answers would
		// let in costs the channels for nothing. Wait up to the floor.
		wait = max(wait, l.floor)
	}
	l.mu.Unlock()

	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.ready:
	case <-t.C:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	waited := time.Since(start)
	if !w.granted {
		l.waiters.Remove(e)
		return Permit{}, &ShedError{Reason: ReasonLimit, Waited: waited, Limit: l.slotsLocked(), Latency: l.latencyLocked()}
	}
	if err := l.deadlineLocked(waited); err != nil {
		l.releaseLocked()
		return Permit{}, err
	}
	return Permit{l: l, Waited: waited}, nil
}

// deadlineLocked sheds a call that the recent latency says cannot finish
// within the timeout after waiting waited. With nothing in flight the
// call is let through as a probe.
func (l *Limiter) deadlineLocked(waited time.Duration) error {
	lat := l.latencyLocked()
	if l.inFlight == 0 || waited+lat < l.timeout {
		return nil
	}
	return &ShedError{Reason: ReasonDeadline, Waited: waited, Limit: l.slotsLocked(), Latency: lat}
}

func (l *Limiter) latencyLocked() time.Duration {
	return time.Duration(l.latency * float64(time.Second))
}

// slotsLocked is the limit as a whole number of calls, at least 1;
// halved while draining.
func (l *Limiter) slotsLocked() int {
	if l.draining > 0 {
		return max(1, int(l.limit)/2)
	}
	return max(1, int(l.limit))
}

func (l *Limiter) takeLocked() {
	l.inFlight++
	l.inFlightN.Store(int64(l.inFlight))
}

// releaseLocked frees a slot and hands free slots to the oldest waiters.
func (l *Limiter) releaseLocked() {
	l.inFlight--
	for l.waiters.Len() > 0 && l.inFlight < l.slotsLocked() {
		w := l.waiters.Remove(l.waiters.Front()).(*waiter)
		w.granted = true
		l.inFlight++
		close(w.ready)
	}
	l.inFlightN.Store(int64(l.inFlight))
}

// Done ends an admitted call and tells the limiter what it showed: took is
// the core call's own duration (not the time the slot was held: what the
// relay does around the call, such as the ledger's commit, is not the
// core's latency). It is ignored for Ignored, and at least the timeout for
// TimedOut.
func (p Permit) Done(s Sample, took time.Duration) {
	l := p.l
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case Answered:
		l.observeLocked(took)
	case TimedOut:
		l.observeLocked(max(took, l.timeout))
	}
	l.releaseLocked()
}

// observeLocked moves the recent latency and the limit by one call.
func (l *Limiter) observeLocked(d time.Duration) {
	sec := d.Seconds()
	if l.latency == 0 {
		l.latency = sec
	} else {
		l.latency += alpha * (min(sec, outlier*l.latency) - l.latency)
	}
	if l.fixed {
		return
	}
	if l.draining > 0 {
		l.draining--
	}
	base := l.baselineLocked(sec)
	target := math.Min(math.Max(tolerance*base, l.floor.Seconds()), l.target.Seconds())
	ratio := target / math.Max(l.latency, 1e-6)
	ratio = math.Min(2, math.Max(0.5, ratio))
	if ratio > 1 && float64(l.inFlight) < l.limit/2 {
		// The limit was not in use: its being enough proves nothing.
		return
	}
	l.limit += gain * (l.limit*ratio - l.limit)
	if ratio > 1 {
		// And one call more per round of calls, as TCP's congestion
		// avoidance: from a limit of 1 (after a slowdown) the
		// multiplicative step alone takes dozens of calls to matter.
		l.limit += 1 / l.limit
	}
	if n := l.waiters.Len(); n > 0 && l.latency < l.floor.Seconds()/2 {
		// A core answering this far within the timeout is nowhere near
		// trouble: let everyone waiting in, rather than shed frames while
		// the limit grows a call at a time from its start.
		l.limit += float64(n)
	}
	l.limit = math.Min(float64(l.max), math.Max(1, l.limit))
	l.limitN.Store(int64(l.slotsLocked()))
}

// baselineLocked takes one call's latency into the baseline and returns
// the baseline: the lowest latency of this bucket and the one before. A
// new bucket drains the core's queue for one round (the limit halved) when
// the baseline is what the target rests on; a core fast enough that the
// floor is the target has no queue of ours to drain.
func (l *Limiter) baselineLocked(sec float64) float64 {
	if now := time.Now(); now.Sub(l.bucketStart) >= baseWindow {
		if tolerance*l.curMin > l.floor.Seconds() {
			l.draining = l.slotsLocked()
		}
		l.prevMin, l.curMin, l.bucketStart = l.curMin, 0, now
	}
	if l.curMin == 0 || sec < l.curMin {
		l.curMin = sec
	}
	if l.prevMin > 0 {
		return math.Min(l.curMin, l.prevMin)
	}
	return l.curMin
}

// InFlight is the number of calls admitted and not done.
func (l *Limiter) InFlight() int { return int(l.inFlightN.Load()) }

// Limit is the current limit, in calls.
func (l *Limiter) Limit() int { return int(l.limitN.Load()) }

// Max is the ceiling of the limit (--max-inflight).
func (l *Limiter) Max() int { return l.max }

// Latency is the moving average of the recent calls' latencies.
func (l *Limiter) Latency() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.latencyLocked()
}
