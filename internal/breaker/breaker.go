// Package breaker stops calling a core that keeps failing (SPEC §5.10).
//
// The breaker opens on evidence that the core is down or failing, never on
// a handful of slow calls from a core that answers everything else:
//
//   - Failures calls in a row that got no answer, none answered in between
//     (ConnectFailure: refused, connect timeout, failed handshake; or
//     Failure: connected, then timed out or lost the connection): a core
//     that answers nothing is down or hung, at any traffic, a single
//     channel's included (SPEC 5.10). An answered call starts the run
//     again, and "in between" is while the failed call was under way: one
//     that fails after the core answered another call since it was sent
//     is a slow call among answered ones and is not counted. So eight slow
//     transfers that time out together, while fast ones are answered
//     around them, make no run; a core that answers nothing does, whether
//     one channel or a thousand are calling it;
//   - or, over the last Window, at least MinCalls calls of which at least
//     Rate failed, counting as failed only the calls that the run would
//     count (none answered while they were under way; the others are left
//     out of the window's counts). So a burst of individually slow
//     transfers among fast ones does not reach it, and neither does a
//     slow-but-alive core whose calls admission keeps within the timeout
//     (package admit).
//
// Open, it lets no call through for Cooldown, and the caller answers at
// once without sending anything. Then it is half-open: one call at a time
// is let through as a probe; a probe that succeeds closes it, one that
// fails opens it again for another Cooldown.
//
// The state machine is github.com/sony/gobreaker/v2's (its two-step form:
// Allow before the call, the verdict after it; its rolling window of
// buckets counts the calls of the last Window). The run of unanswered
// calls is counted here, since gobreaker's counts do not know when each
// call was sent. This package adds what the relay needs around it: counts of opens and refused calls for /metrics, a
// timer that moves an open breaker to half-open when its cool-down ends (so
// the state shown in /metrics and /readyz, and the log line, change on
// time rather than at the next call), and excluded outcomes (a call cut
// short by a stopping relay says nothing about the core).
package breaker

import (
	"cmp"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// State is a breaker's state.
type State = gobreaker.State

// The states. Their numbers (0, 1, 2) are what /metrics shows.
const (
	Closed   = gobreaker.StateClosed
	HalfOpen = gobreaker.StateHalfOpen
	Open     = gobreaker.StateOpen
)

// ErrOpen is the error of a call the breaker did not let through: open, or
// half-open with its probe already under way. Nothing was sent.
var ErrOpen = errors.New("core breaker open: core not called")

// Verdict is what a call let through says about the core.
type Verdict int

const (
	// Success: the core answered (whatever it answered).
	Success Verdict = iota
	// Failure: the call connected and then got no answer (timed out, or
	// the connection broke). It counts towards both the run of Failures
	// and the failure rate.
	Failure

	// Excluded: the call says nothing about the core (cancelled by a
	// stopping relay, say); it is not counted.
	Excluded
	// ConnectFailure: the call could not connect (refused, connect
	// timeout, failed handshake): it counts like Failure.
	ConnectFailure
)

// errFailure and errExcluded carry a verdict through gobreaker's done(err).
var (
	errFailure  = errors.New("breaker: failure")
	errExcluded = errors.New("breaker: excluded")
)

// Settings configure a Breaker.
type Settings struct {
	// Name names the core it guards (its URL): the label in /metrics.
	Name string
	// Failures is how many calls in a row that got no answer open the
	// breaker. New returns nil (no breaker) for 0.
	Failures int
	// Window is how far back the failure rate looks (a rolling window of
	// ten buckets); 0 means DefaultWindow.
	Window time.Duration
	// MinCalls is how many calls the window must hold before its rate
	// counts; 0 means DefaultMinCalls.
	MinCalls int
	// Rate is the share of failed calls in the window (0 < Rate ≤ 1) that
	// opens the breaker; 0 means DefaultRate.
	Rate float64
	// Cooldown is how long it stays open before letting a probe through.
	Cooldown time.Duration
	// OnChange, if set, is told of every change of state (for the log). It
	// runs with the breaker's lock held: it must not call the breaker.
	OnChange func(name string, from, to State)
}

// Defaults of the failure-rate rule: over ten seconds, at least twenty
// calls of which half failed. Twenty calls is few enough that a hung core
// is found within its first --timeout or two at any real load, and many
// enough that a few slow transfers never make a rate.
const (
	DefaultWindow   = 10 * time.Second
	DefaultMinCalls = 20
	DefaultRate     = 0.5
)

// Breaker guards one core. A nil *Breaker lets every call through.
type Breaker struct {
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]
	name     string
	failures int
	window   time.Duration
	minCalls int
	rate     float64
	cooldown time.Duration
	opens    atomic.Int64
	refused  atomic.Int64
	// unanswered is the run of calls in a row that got no answer; it is
	// written before the verdict reaches gobreaker, whose ReadyToTrip
	// reads it.
	unanswered atomic.Int64
	// epoch is the breaker's start; lastAnswer is when, since epoch, the
	// core last answered a call (monotonic, in nanoseconds).
	epoch      time.Time
	lastAnswer atomic.Int64
	// tripped says which rule opened the breaker last, for its error.
	tripped atomic.Value // string
}

// New returns a breaker, or nil when s.Failures is 0 (off).
func New(s Settings) (*Breaker, error) {
	if s.Failures < 0 || s.Cooldown < 0 {
		return nil, fmt.Errorf("breaker: negative failures (%d) or cool-down (%v)", s.Failures, s.Cooldown)
	}
	if s.Failures == 0 {
		return nil, nil
	}
	if s.Cooldown == 0 {
		return nil, errors.New("breaker: a cool-down of 0 would never stop calling the core")
	}
	if s.Window < 0 || s.MinCalls < 0 || s.Rate < 0 || s.Rate > 1 {
		return nil, fmt.Errorf("breaker: window %v, min calls %d, rate %v: want window and min calls ≥ 0, 0 ≤ rate ≤ 1", s.Window, s.MinCalls, s.Rate)
	}
	b := &Breaker{
		name: s.Name, failures: s.Failures, cooldown: s.Cooldown,
		window:   cmp.Or(s.Window, DefaultWindow),
		minCalls: cmp.Or(s.MinCalls, DefaultMinCalls),
		rate:     cmp.Or(s.Rate, DefaultRate),
		epoch:    time.Now(),
	}
	b.tripped.Store("")
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         s.Name,
		MaxRequests:  1, // one probe at a time while half-open
		Timeout:      s.Cooldown,
		Interval:     b.window,
		BucketPeriod: b.window / 10,
		ReadyToTrip:  b.readyToTrip,
		OnStateChange: func(name string, from, to State) {
			if to == Open {
				b.opens.Add(1)
				// gobreaker moves to half-open when asked after the
				// cool-down; ask then. State takes the lock, so not here.
				time.AfterFunc(s.Cooldown+time.Millisecond, func() { b.cb.State() })
			}
			if s.OnChange != nil {
				s.OnChange(name, from, to)
			}
		},
		IsSuccessful: func(err error) bool { return err == nil },
		IsExcluded:   func(err error) bool { return errors.Is(err, errExcluded) },
	})
	return b, nil
}

// Allow asks to make one call. When the breaker lets it through, done must
// be called exactly once with what the call said about the core. Otherwise
// err is ErrOpen and nothing may be sent.
func (b *Breaker) Allow() (done func(Verdict), err error) {
	if b == nil {
		return func(Verdict) {}, nil
	}
	report, err := b.cb.Allow()
	if err != nil {
		b.refused.Add(1)
		return nil, fmt.Errorf("%w (%s; probing again after %v)", ErrOpen, b.Why(), b.cooldown)
	}
	sent := time.Since(b.epoch).Nanoseconds()
	return func(v Verdict) {
		switch v {
		case Success:
			b.lastAnswer.Store(time.Since(b.epoch).Nanoseconds())
			b.unanswered.Store(0)
			report(nil)
		case Failure, ConnectFailure:
			// A call the core answered another call during is a slow
			// call among answered ones: it says nothing of a core that
			// answers nothing, so it counts in neither rule.
			if b.lastAnswer.Load() > sent {
				report(errExcluded)
				return
			}
			b.unanswered.Add(1)
			report(errFailure)
		default:
			report(errExcluded)
		}
	}, nil
}

// readyToTrip is the policy (package comment). It runs under gobreaker's
// lock, after each failure, with the window's counts.
func (b *Breaker) readyToTrip(c gobreaker.Counts) bool {
	if n := b.unanswered.Load(); n >= int64(b.failures) {
		b.tripped.Store(fmt.Sprintf("%d calls in a row got no answer (could not connect, timed out or lost the connection)", n))
		return true
	}
	counted := c.TotalSuccesses + c.TotalFailures
	if counted >= uint32(b.minCalls) && float64(c.TotalFailures) >= b.rate*float64(counted) {
		b.tripped.Store(fmt.Sprintf("%d of the last %d calls within %v failed to connect or timed out", c.TotalFailures, counted, b.window))
		return true
	}
	return false
}

// Why says which rule opened the breaker last ("" before it ever opened).
func (b *Breaker) Why() string {
	if b == nil {
		return ""
	}
	return b.tripped.Load().(string)
}

// Name is the name of the core guarded.
func (b *Breaker) Name() string { return b.name }

// State is the breaker's state now.
func (b *Breaker) State() State {
	if b == nil {
		return Closed
	}
	return b.cb.State()
}

// Opens is how many times the breaker has opened.
func (b *Breaker) Opens() int64 { return b.opens.Load() }

// Refused is how many calls the breaker did not let through.
func (b *Breaker) Refused() int64 { return b.refused.Load() }

// Cooldown is how long the breaker stays open.
func (b *Breaker) Cooldown() time.Duration { return b.cooldown }

// Failures is how many calls in a row that got no answer open the
// breaker.
func (b *Breaker) Failures() int { return b.failures }
