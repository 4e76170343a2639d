// Package admit bounds the calls the relay has in flight to a core and
// admits a call only when it can still finish within the call's timeout
// (SPEC §5.12).
//
// # Why a bound at all
//
// A core serves a fixed number of requests at once (its capacity, C) and
// queues the rest, or refuses them. Sending it everything means the queue
// grows until requests wait longer than --timeout, and each of those
// becomes E901: sent, result unknown, a transfer somebody must settle by
// hand. A frame refused before anything is sent is E902 instead, which the
// channel may simply resend. So the limiter trades unknowns for refusals:
// it keeps the core busy at its capacity and refuses (sheds) what the core
// could not finish in time.
//
// # The model
//
// A core of capacity C and service time S delivers at most X = C/S calls a
// second. By Little's law a core with N of our calls in flight answers
// them after about max(S, N/X): below C nothing queues, above it every
// call waits for the N-C ahead of it. The limiter estimates, from the
// calls it admitted:
//
//   - S, the baseline: the lowest latency of the calls answered over the
//     last 5 to 10 seconds (two buckets of 5 s), a call that did not queue;
//   - X, the delivery rate: for each answered call, the calls answered
//     while it was in flight divided by its time in flight (a rate sample,
//     as TCP BBR takes one per acknowledgement), and the highest sample of
//     the last 1 to 2 seconds (two buckets of 1 s);
//   - the recent latency, a moving average (EWMA) of the answered calls'
//     latencies, each counted at most at twice the average so far (a few
//     individually slow transfers, a burst of them even timing out, barely
//     move it; queueing moves every call and the average follows within a
//     few dozen calls).
//
// It aims at a latency of target = 2·S, never more than half the timeout
// and never less than a twentieth of it: the core has about C calls queued
// behind the C it serves, so it never idles, and the calls in flight still
// finish within the timeout if the core slows down tenfold at once (a
// queue of 2·S drains in 20·S after a tenfold slow-down, within the timeout
// while S is at most a twentieth of it; the floor lets a core that fast
// keep more in flight, since even then the calls finish within half the
// timeout). The limit that gives that latency is X·target.
//
// # Why it cannot overshoot
//
// Every limit is capped by what the measured delivery rate can finish in
// time: limit ≤ X·(3/4)·timeout. With N in flight the last one is answered
// after about N/X, so whatever the latency samples say (and they come back
// only one latency later), a call admitted under the cap is answered
// within three quarters of the timeout unless the core itself slows down.
// While the core is not saturated the rate samples are N/S and the cap is
// N·(3/4)·timeout/S: the limit grows by at most that factor per round of
// calls (from a start of 8 with S = 300 ms and a 1 s timeout: 20, then
// 50, then 125), never on a guess. The time a slot is held outside the
// core call (the claim's commit comes first) is measured and added, so
// that the relay's own delays are not taken for the core's.
//
// # How the limit moves
//
// Each answered call moves the limit, in one of two regimes:
//
//   - No queue: the recent latency is under half-way from S to the target.
//     The core has room, and the limit grows to the cap X·(3/4)·timeout at
//     once (only while the limit is in use, half of it at least: an idle
//     limit proves nothing, and it is not lowered for want of traffic
//     either, so that a burst after a quiet night is let in).
//   - Queue: the latency is past that half-way. The limit moves towards
//     min(X·target, limit·target/latency) by a twentieth per call, at most
//     halving or doubling: Little's law at the measured rate, and the
//     latency's own gradient, which falls first when the core slows down
//     (the rate's maximum remembers the old speed for a second or two).
//
// When queueing at the core inflates the latency towards the timeout, the
// limit falls in proportion; a call that timed out counts as taking the
// whole timeout. Calls are shed at admission once the recent latency plus
// the wait leaves no room within the timeout (ReasonDeadline), so a core
// slower than the timeout gets one call at a time (a probe) and no flood.
//
// Under constant overload every call queues, and a baseline taken only
// from queued calls would creep up window after window; so when a bucket
// starts, the limit is halved for one round of calls, the core's queue
// drains, and the new bucket sees calls that did not queue (BBR's "probe
// RTT").
//
// A core that refuses beyond its capacity (503 or 429, Refused) never
// queues: its latency stays S and its refusals are the only sign of its
// capacity. A refusal says the core was serving C = the calls at the core
// when it arrived there, less one (Permit.Sending marks a call as at the
// core). That instant is not seen: the count when it was sent, or when its
// refusal came back, whichever is more, stands for it (a call that waited
// for a new connection arrives after calls sent later; counted at its send
// alone, such a refusal takes the core for smaller than it is). A slot is held longer than its call (the claim's commit comes
// first), so C calls at the core take C·(S + overhead)/S slots (Little's
// law once more), and one more, so that a call is ready to go as soon as
// one at the core ends; capping the slots at C itself would leave the
// core idle for the overhead's share of every call. What keeps the core
// at C is Sending: a call over C waits there, after its claim, for one at
// the core to end. C is raised by one call per second (or per ten
// baselines, if longer) without a refusal, so that a core that grew is
// found, at the price of about one refusal a second.
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
// The wait is short (milliseconds) on purpose: a shed frame is answered
// at once, and a frame that waits long would only eat into the channel's
// own timeout. The limit, not the queue, is what keeps goodput up: under
// overload a slot freed is taken within microseconds by a waiting frame.
//
// The start is the exception. Until the first call has come back the
// core's speed is unknown: the limit is Settings.Initial (InitialFor: what
// a core of MinRate calls a second finishes within 3/4 of the timeout),
// and as many frames again may wait, up to half the timeout, for the first
// answers, which raise the limit to the cap at once. A start is the one
// time the limit must guess: too high floods a slow core with calls it
// cannot finish in time (a core of 4 at a time and 300 ms finishes 10
// within 3/4 of a 1 s timeout), too low leaves a large core idle for the
// few rounds of calls the growth above takes (with 300 ms calls and a 1 s
// timeout about 0.9 s for a core of 64).
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
	"cmp"
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

// DefaultMax is the relay's default for Settings.Max (--max-inflight):
// more than a core of ours serves at once, so that the adapted limit, not
// the ceiling, is what binds.
const DefaultMax = 256

// MinRate is the slowest core (calls answered a second) that InitialFor
// assumes.
const MinRate = 10

// InitialFor is the relay's default for Settings.Initial: what a core
// answering MinRate calls a second finishes within three quarters of the
// timeout (at least 4), so that a relay started into a flood does not
// send a slow core more than it can finish in time before the first
// answers come back, and a fast one is found within a few rounds of calls.
func InitialFor(timeout time.Duration) int {
	return max(4, int(math.Round(MinRate*safeShare*timeout.Seconds())))
}

// DefaultMaxWait is short enough that a shed frame is answered within a
// few milliseconds, and long enough to take a slot that frees meanwhile
// under overload (then slots free every few milliseconds or faster).
const DefaultMaxWait = 2 * time.Millisecond

const (
	// gain is how far one finished call moves the limit towards its
	// proposal in the queue regime: about twenty calls to get most of the
	// way.
	gain = 0.05
	// alpha is the weight of one call in the moving average.
	alpha = 0.1
	// tolerance is the latency aimed at, in baselines.
	tolerance = 2
	// baseWindow is the length of one of the baseline's two buckets.
	baseWindow = 5 * time.Second
	// rateWindow is the length of one of the delivery rate's two buckets.
	rateWindow = time.Second
	// outlier caps one call's latency at this many times the average, so
	// that a few slow calls do not look like queueing.
	outlier = 2
	// safeShare is the share of the timeout the calls in flight must be
	// able to finish within at the measured delivery rate: the cap.
	safeShare = 0.75
	// refusedProbe is the least time between two raises of the cap a
	// refusal set.
	refusedProbe = time.Second
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
	now     func() time.Time // time.Now; a test's clock

	mu       sync.Mutex
	limit    float64
	inFlight int
	atCore   int        // calls marked Sending and not done
	latency  float64    // moving average, in seconds; 0 until the first call
	overhead float64    // moving average of a slot's time outside the core call, in seconds
	waiters  *list.List // of *waiter, oldest first
	gate     *list.List // of *waiter in Sending, oldest first
	// The baseline: the lowest latency of the current bucket and of the
	// one before (0: none yet), and when the current one started.
	curMin, prevMin float64
	bucketStart     time.Time
	// draining counts down the calls of a round with the limit halved,
	// after a bucket started.
	draining int
	// The delivery rate: the highest rate sample (calls a second) of the
	// current bucket and the one before.
	curRate, prevRate float64
	rateStart         time.Time
	// trustAt is when the delivery rate has seen a whole round of calls:
	// two latencies after the first answer; zero until then.
	trustAt time.Time
	// queued is set once a queue was seen (the queue regime, or a
	// refusal): the start's growth is over.
	queued bool
	// refusedCap is the core's capacity in calls at the core a refusal
	// showed (0: none), raised by one call at refusedRaise; the limit's
	// cap is that many calls in slots (refusedSlotsLocked).
	refusedCap   float64
	refusedRaise time.Time
	lastRefused  time.Time
	// pause: a call refused while it was the only one in flight found
	// the core full of work that is not ours (or that we gave up on): no
	// probe until then.
	pause time.Time

	// Mirrors for the metrics' reads, which must not take mu.
	inFlightN atomic.Int64
	limitN    atomic.Int64
}

type waiter struct {
	ready   chan struct{} // closed when granted
	granted bool          // under mu
	atCore  int           // a call let go by the gate: its Permit.atCore
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
	now := time.Now()
	l := &Limiter{
		now:         time.Now,
		max:         s.Max,
		timeout:     s.Timeout,
		target:      s.Timeout / 2,
		floor:       s.Timeout / 20,
		maxWait:     s.MaxWait,
		fixed:       s.Fixed,
		waiters:     list.New(),
		gate:        list.New(),
		bucketStart: now,
		rateStart:   now,
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
	// When the call was admitted and the calls then in flight (itself
	// included), for its rate sample and a refusal's cap.
	admitted time.Time
	inFlight int
	// atCore is the calls at the core when this one was sent, itself
	// included (Sending); 0: not marked. gated is how long Sending made
	// it wait: neither the core's time nor the relay's overhead.
	atCore int
	gated  time.Duration
}

// Sending marks the call as sent to the core now, after whatever the
// caller does first with its slot (the claim). A refusal then counts the
// calls at the core, not the slots, so that the core's capacity is not
// taken for less than it is. A call never marked counts its slots.
//
// Once a core has refused calls, Sending waits (first come, first
// served) while the core's capacity is taken by calls of ours, at most
// twice the recent latency (a call at the core ends within one); then the
// call goes anyway (at worst the core refuses it: an answer, nothing
// posted). The slots, more than the core's capacity, keep a call ready
// here for each one that ends, so that the core never waits for our
// claim.
func (p *Permit) Sending() {
	l := p.l
	if l == nil || p.atCore > 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refusedCap > 0 && (l.atCore >= int(l.refusedCap) || l.gate.Len() > 0) {
		w := &waiter{ready: make(chan struct{})}
		e := l.gate.PushBack(w)
		start := l.now()
		defer func() { p.gated = l.now().Sub(start) }()
		wait := max(2*time.Duration(max(l.baseline(), l.latency)*float64(time.Second)), l.maxWait)
		l.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-w.ready:
		case <-t.C:
		}
		t.Stop()
		l.mu.Lock()
		if w.granted {
			p.atCore = w.atCore
			return
		}
		l.gate.Remove(e)
	}
	l.atCore++
	p.atCore = l.atCore
}

// openGateLocked lets the oldest calls waiting in Sending go while the
// core has room.
func (l *Limiter) openGateLocked() {
	for l.gate.Len() > 0 && (l.refusedCap == 0 || l.atCore < int(l.refusedCap)) {
		w := l.gate.Remove(l.gate.Front()).(*waiter)
		w.granted = true
		l.atCore++
		w.atCore = l.atCore
		close(w.ready)
	}
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
	// Refused: the core answered that it is at its capacity (503 or
	// 429): no latency sample, and the limit is capped below the calls
	// that were in flight when it was sent.
	Refused
)

// Acquire admits one call or sheds it. The returned error is a
// *ShedError (matching ErrShed) when the call is shed; then nothing may
// be sent.
func (l *Limiter) Acquire() (Permit, error) {
	if l == nil {
		return Permit{}, nil
	}
	l.mu.Lock()
	start := l.now()
	if err := l.deadlineLocked(0); err != nil {
		l.mu.Unlock()
		return Permit{}, err
	}
	if l.waiters.Len() == 0 && l.inFlight < l.slotsLocked() {
		p := l.takeLocked(start)
		l.mu.Unlock()
		return p, nil
	}
	wait := l.waitLocked()
	if wait == 0 {
		wait = l.maxWait
	}
	w := &waiter{ready: make(chan struct{})}
	e := l.waiters.PushBack(w)
	l.mu.Unlock()

	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.ready:
	case <-t.C:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	waited := now.Sub(start)
	if !w.granted {
		l.waiters.Remove(e)
		return Permit{}, &ShedError{Reason: ReasonLimit, Waited: waited, Limit: l.slotsLocked(), Latency: l.latencyLocked()}
	}
	if err := l.deadlineLocked(waited); err != nil {
		l.releaseLocked()
		return Permit{}, err
	}
	return Permit{l: l, Waited: waited, admitted: now, inFlight: l.inFlight}, nil
}

// waitLocked is how long a call over the limit may wait at the start, or
// 0 for MaxWait: until the first answer, as many calls as the limit may
// wait up to half the timeout for the first answers to raise it.
func (l *Limiter) waitLocked() time.Duration {
	if l.fixed || l.latency != 0 || int(l.limit) >= l.max || l.waiters.Len() >= int(l.limit) {
		return 0
	}
	return max(l.maxWait, l.target)
}

// deadlineLocked sheds a call that the recent latency says cannot finish
// within the timeout after waiting waited. With nothing in flight the
// call is let through as a probe.
func (l *Limiter) deadlineLocked(waited time.Duration) error {
	lat := l.latencyLocked()
	if l.inFlight == 0 && !l.pause.IsZero() && l.now().Before(l.pause) {
		return &ShedError{Reason: ReasonLimit, Waited: waited, Limit: l.slotsLocked(), Latency: lat}
	}
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

func (l *Limiter) takeLocked(now time.Time) Permit {
	l.inFlight++
	l.inFlightN.Store(int64(l.inFlight))
	return Permit{l: l, admitted: now, inFlight: l.inFlight}
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
	now := l.now()
	held := max(now.Sub(p.admitted)-p.gated, took)
	if p.atCore > 0 {
		l.atCore--
		defer l.openGateLocked() // after a refusal's new cap
	}
	switch s {
	case Answered:
		l.observeLocked(now, took, held, p.inFlight)
	case TimedOut:
		l.observeLocked(now, max(took, l.timeout), max(held, l.timeout), p.inFlight)
	case Refused:
		// The calls at the core when it refused this one: at least those
		// there when it was sent, and at least those there now, when its
		// refusal is back. A call sent over a new connection arrives
		// after calls sent later over open ones: counted at the send
		// alone, its refusal takes the core for smaller than it is, and
		// the lowest estimate of a burst is the cap.
		l.refusedLocked(now, max(cmp.Or(p.atCore, p.inFlight), l.atCore+1))
	}
	l.releaseLocked()
}

// rateLocked takes one rate sample into the delivery rate's maximum.
func (l *Limiter) rateLocked(now time.Time, r float64) {
	if now.Sub(l.rateStart) >= rateWindow {
		l.prevRate, l.curRate, l.rateStart = l.curRate, 0, now
	}
	l.curRate = max(l.curRate, r)
}

// rate is the delivery rate: the highest sample of the last one to two
// seconds.
func (l *Limiter) rate() float64 { return max(l.curRate, l.prevRate) }

// refusedLocked caps the limit below the calls at the core when the
// refused call was sent (inFlight, itself included).
func (l *Limiter) refusedLocked(now time.Time, inFlight int) {
	l.queued = true
	if l.fixed {
		return
	}
	if inFlight <= 1 {
		l.pause = now.Add(max(time.Duration(l.baseline()*float64(time.Second)), l.latencyLocked(), l.maxWait))
	}
	// The lowest estimate of one burst of refusals (within a baseline of
	// each other), not of all time: a cap that only went down would drift
	// below the core's capacity with every refusal that met calls of ours
	// still in the claim, not yet at the core.
	c := float64(max(1, inFlight-1))
	burst := now.Sub(l.lastRefused) < max(time.Duration(l.baseline()*float64(time.Second)), l.maxWait)
	if l.refusedCap == 0 || c < l.refusedCap || !burst {
		l.refusedCap = c
	}
	l.lastRefused = now
	l.refusedRaise = now.Add(max(refusedProbe, time.Duration(10*l.baseline()*float64(time.Second))))
	l.limit = max(1, min(l.limit, l.refusedSlotsLocked()))
	l.limitN.Store(int64(l.slotsLocked()))
}

// refusedSlotsLocked is the slots it takes to keep refusedCap calls at
// the core (a slot is held for the baseline at the core and the overhead
// outside it), and one more, so that a call waits ready in Sending.
func (l *Limiter) refusedSlotsLocked() float64 {
	perCall := 1.0
	if base := l.baseline(); base > 0 && l.overhead > 0 {
		perCall = (base + l.overhead) / base
	}
	return math.Ceil(l.refusedCap*perCall) + 1
}

// observeLocked moves the recent latency and the limit by one call that
// took d at the core and held its slot for held, admitted with inFlight
// calls in flight (itself included).
func (l *Limiter) observeLocked(now time.Time, d, held time.Duration, inFlight int) {
	sec := d.Seconds()
	if l.latency == 0 {
		l.latency = sec
		l.trustAt = now.Add(2 * d)
	} else {
		l.latency += alpha * (min(sec, outlier*l.latency) - l.latency)
	}
	if l.fixed {
		return
	}
	if l.draining > 0 {
		l.draining--
	}
	// The call's rate sample (Little's law): the calls that were in
	// flight when it was admitted, answered within the time it held its
	// slot. The slot is held a little longer than the core call (the
	// claim's commit comes first): the calls in flight are the rate times
	// the core's latency plus that overhead, which the limits below add
	// so that the relay's own delays do not shrink the limit.
	r := float64(inFlight) / held.Seconds()
	l.rateLocked(now, r)
	over := (held - d).Seconds()
	if l.overhead == 0 {
		l.overhead = over
	} else {
		l.overhead += alpha * (over - l.overhead)
	}
	base := l.baselineLocked(now, sec)
	target := math.Min(math.Max(tolerance*base, l.floor.Seconds()), l.target.Seconds())
	// ceiling is the cap: what the measured delivery rate can finish
	// within three quarters of the timeout, and a refusal's cap.
	ceiling := math.Min(float64(l.max), math.Max(1, l.rate()*(safeShare*l.timeout.Seconds()+l.overhead)))
	if l.refusedCap > 0 {
		if !now.Before(l.refusedRaise) {
			l.refusedCap++
			l.refusedRaise = now.Add(max(refusedProbe, time.Duration(10*base*float64(time.Second))))
		}
		slots := l.refusedSlotsLocked()
		ceiling = math.Min(ceiling, slots)
		l.limit = math.Min(l.limit, slots)
	}
	inUse := float64(l.inFlight) >= l.limit/2
	// This call waited in the core's queue: its latency is past half-way
	// to the target, and past the floor (a call that fast is no risk: a
	// core that fast has no queue worth the name, and a latency that low
	// is as likely our own CPU's as the core's).
	queued := sec >= math.Max((base+target)/2, l.floor.Seconds())
	// The limit this call says gives the target latency: its rate times
	// the target (Little's law again).
	proposal := math.Min(r*(target+over), ceiling)
	switch {
	case !queued && !l.queued:
		// The start, no queue yet: the core has room. Grow to the cap,
		// while in use.
		if inUse && ceiling > l.limit {
			l.limit = ceiling
		}
	case queued:
		l.queued = true
		l.limit += gain * (proposal - l.limit)
	case inUse && proposal > l.limit:
		// A call that did not queue, with the limit in use: grow, and
		// by one call more per round of calls, as TCP's congestion
		// avoidance (from a limit of 1, after a slowdown, the
		// multiplicative step alone takes dozens of calls to matter).
		l.limit = math.Min(l.limit+gain*(proposal-l.limit)+1/l.limit, ceiling)
	}
	if now.After(l.trustAt) && inUse {
		l.limit = math.Min(l.limit, ceiling)
	}
	l.limit = math.Min(float64(l.max), math.Max(1, l.limit))
	l.limitN.Store(int64(l.slotsLocked()))
}

func (l *Limiter) baseline() float64 {
	if l.prevMin > 0 && l.curMin > 0 {
		return math.Min(l.curMin, l.prevMin)
	}
	return math.Max(l.curMin, l.prevMin)
}

// baselineLocked takes one call's latency into the baseline and returns
// the baseline: the lowest latency of this bucket and the one before. A
// new bucket drains the core's queue for one round (the limit halved) when
// the baseline is what the target rests on; a core fast enough that the
// floor is the target has no queue of ours to drain.
func (l *Limiter) baselineLocked(now time.Time, sec float64) float64 {
	if now.Sub(l.bucketStart) >= baseWindow {
		if tolerance*l.curMin > l.floor.Seconds() && l.queued {
			l.draining = l.slotsLocked()
		}
		l.prevMin, l.curMin, l.bucketStart = l.curMin, 0, now
	}
	if l.curMin == 0 || sec < l.curMin {
		l.curMin = sec
	}
	return l.baseline()
}

// InFlight is the number of calls admitted and not done.
func (l *Limiter) InFlight() int { return int(l.inFlightN.Load()) }

// Limit is the current limit, in calls.
func (l *Limiter) Limit() int { return int(l.limitN.Load()) }

// RefusedCap is the core's capacity in calls at the core that its
// refusals showed (0: it has refused none), and AtCore the calls at the
// core now (marked by Sending, not yet done).
func (l *Limiter) RefusedCap() (refusedCap, atCore int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.refusedCap), l.atCore
}

// Max is the ceiling of the limit (--max-inflight).
func (l *Limiter) Max() int { return l.max }

// Latency is the moving average of the recent calls' latencies.
func (l *Limiter) Latency() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.latencyLocked()
}

// Rate is the delivery rate the limit rests on: the highest rate sample
// (calls answered a second) of the last one to two seconds.
func (l *Limiter) Rate() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rate()
}
