// Package breaker stops calling a core that keeps failing (SPEC §5.10).
//
// After Failures consecutive calls that failed — the caller decides what a
// failure is; the relay counts only calls that could not connect or timed
// out — the breaker opens: for Cooldown no call is let through, and the
// caller answers at once without sending anything. Then it is half-open:
// one call at a time is let through as a probe; a probe that succeeds
// closes it, one that fails opens it again for another Cooldown.
//
// The state machine is github.com/sony/gobreaker/v2's (its two-step form:
// Allow before the call, the verdict after it). This package adds what the
// relay needs around it: counts of opens and refused calls for /metrics, a
// timer that moves an open breaker to half-open when its cool-down ends (so
// the state shown in /metrics and /readyz, and the log line, change on
// time rather than at the next call), and excluded outcomes (a call cut
// short by a stopping relay says nothing about the core).
package breaker

import (
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
	// Failure: the call could not connect or timed out.
	Failure
	// Excluded: the call says nothing about the core (cancelled by a
	// stopping relay, say); it is not counted.
	Excluded
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
	// Failures is how many consecutive failures open the breaker. New
	// returns nil (no breaker) for 0.
	Failures int
	// Cooldown is how long it stays open before letting a probe through.
	Cooldown time.Duration
	// OnChange, if set, is told of every change of state (for the log). It
	// runs with the breaker's lock held: it must not call the breaker.
	OnChange func(name string, from, to State)
}

// Breaker guards one core. A nil *Breaker lets every call through.
type Breaker struct {
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]
	name     string
	failures int
	cooldown time.Duration
	opens    atomic.Int64
	refused  atomic.Int64
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
	b := &Breaker{name: s.Name, failures: s.Failures, cooldown: s.Cooldown}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        s.Name,
		MaxRequests: 1, // one probe at a time while half-open
		Timeout:     s.Cooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= uint32(s.Failures) },
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
		return nil, fmt.Errorf("%w (%d calls in a row failed to connect or timed out; probing again after %v)", ErrOpen, b.failures, b.cooldown)
	}
	return func(v Verdict) {
		switch v {
		case Success:
			report(nil)
		case Failure:
			report(errFailure)
		default:
			report(errExcluded)
		}
	}, nil
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

// Failures is how many consecutive failures open the breaker.
func (b *Breaker) Failures() int { return b.failures }
