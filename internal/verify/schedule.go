package verify

import (
	"encoding/hex"
	"math/rand/v2"
	"time"
)

// Schedule is everything drawn from one seed: the business transactions the
// channels send and the faults injected while they do.
type Schedule struct {
	Index  int
	Seed   uint64
	Store  string // "sqlite" or "postgres"
	Relays int
	Txs    []Business
	Events []Event
	// Tail: the business transactions the unknown tail (tail.go) may
	// send after the traffic, in order.
	Tail []Business
	// On PostgreSQL, the ledger is on a synchronous pair that fails over
	// once (Failover), or on a server whose clock is shifted by
	// ClockShift for the whole schedule (which must change nothing).
	Failover   bool
	ClockShift time.Duration
	// EarlySettle: some business transactions (Business.EarlySettle) are
	// settled while their call is at the core, and reprocess runs only
	// after quiesce.
	EarlySettle bool
}

// clockShift is how far a shifted database clock is from the relays'.
const clockShift = 10 * time.Minute

// Business is one business transaction of a channel: one GUID, retried.
type Business struct {
	GUID        string
	Start       time.Duration // after the traffic starts
	Amount      int64
	Memo        string
	Twice       bool // the first attempt goes out on two connections at once
	VariantAt   int  // the attempt (from 1) sent with another body; 0: none
	MaxAttempts int
	Relays      []int         // the relay of each attempt (and of the twin)
	Backoff     time.Duration // between attempts
	Replay      bool          // after a final answer, send once more
	// EarlySettle: its call is slow at the core (memo SLOW, params.slow,
	// within the relay's timeout), and resolve settles the GUID while the
	// core holds it, too early: the lookup gets 404 and the row becomes
	// FAILED/E902, until the relay records the core's late 200 over it.
	// It is sent again only after E902 (nothing sent), with no twin, no
	// other body and no replay: any other send of the GUID in that window
	// would be a second posting, which the late-answer rule cannot
	// prevent.
	EarlySettle bool
}

// Event is one fault at an offset of the traffic.
type Event struct {
	At    time.Duration
	Kind  string
	Relay int
	N     int
	Delay time.Duration
}

// params are the relay settings the schedules are drawn against.
type params struct {
	timeout   time.Duration // relay --timeout
	maxDelay  time.Duration // the longest core delay a fault draws
	rate      float64       // business transactions per second
	faultRate float64       // faults per second
	slow      time.Duration // how long the core holds an early-settled call
	// earlyAll: every schedule is an early-settle schedule (for the plant
	// only they can show), with one business transaction in earlyAllEvery
	// settled early rather than one in earlyEvery: a plant run must catch
	// the plant in every schedule, and each of these GUIDs can show it
	// only if the core's late 200 reaches its relay before the relay's
	// own timeout, which a loaded machine often misses. Otherwise one
	// schedule in two.
	earlyAll bool
}

// One business transaction in this many is settled early in an
// early-settle schedule (a plant run: earlyAllEvery).
const (
	earlyEvery    = 50
	earlyAllEvery = 10
)

var defaultParams = params{
	timeout:   time.Second,
	maxDelay:  1800 * time.Millisecond,
	rate:      300,
	faultRate: 8,
	slow:      850 * time.Millisecond,
}

// newSchedule draws schedule index of seed.
func newSchedule(seed uint64, index int, store string, relays int, duration time.Duration, p params) Schedule {
	rng := rand.New(rand.NewPCG(seed, uint64(index)))
	// The draws per schedule (early settle, failover, clock) come from a
	// stream of their own, so that the transactions and faults of a seed
	// are those drawn before these existed.
	setup := rand.New(rand.NewPCG(seed, uint64(index)|1<<62))
	s := Schedule{Index: index, Seed: seed, Store: store, Relays: relays}
	s.EarlySettle = setup.IntN(2) == 0 || p.earlyAll
	every := earlyEvery
	if p.earlyAll {
		every = earlyAllEvery
	}
	n := int(p.rate * duration.Seconds())
	for range n {
		b := Business{
			GUID:        randomGUID(rng),
			Start:       time.Duration(rng.Int64N(int64(duration))),
			Amount:      1 + rng.Int64N(9999),
			Memo:        "verify",
			Twice:       rng.IntN(5) == 0,
			MaxAttempts: 2 + rng.IntN(5),
			Backoff:     time.Duration(50+rng.IntN(400)) * time.Millisecond,
			Replay:      rng.IntN(4) == 0,
		}
		if rng.IntN(20) == 0 {
			b.Memo = "FAIL on purpose" // the core's 500: E500, never posted
		}
		if rng.IntN(8) == 0 {
			b.VariantAt = 1 + rng.IntN(b.MaxAttempts)
		}
		for range b.MaxAttempts + 2 {
			b.Relays = append(b.Relays, rng.IntN(relays))
		}
		if setup.IntN(every) == 0 && s.EarlySettle {
			b.EarlySettle, b.Memo = true, "SLOW early settle"
			b.Twice, b.VariantAt, b.Replay = false, 0, false
		}
		s.Txs = append(s.Txs, b)
	}
	if store == StorePostgres {
		switch setup.IntN(5) {
		case 0:
			s.Failover = true
		case 1:
			s.ClockShift = clockShift
		case 2:
			s.ClockShift = -clockShift
		}
	}
	s.Tail = drawTail(setup)
	kinds := faultsFor(store, s.Failover)
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	nf := int(p.faultRate * duration.Seconds())
	for range nf {
		w := rng.IntN(total)
		var k faultKind
		for _, k = range kinds {
			if w < k.weight {
				break
			}
			w -= k.weight
		}
		e := Event{
			At:    time.Duration(rng.Int64N(int64(duration))),
			Kind:  k.name,
			Relay: rng.IntN(relays),
			N:     1 + rng.IntN(4),
		}
		e.Delay = k.delay(rng, p)
		s.Events = append(s.Events, e)
	}
	if s.Failover {
		s.Events = append(s.Events, Event{At: time.Duration(rng.Int64N(int64(duration))), Kind: failoverKind})
	}
	return s
}

func randomGUID(rng *rand.Rand) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return hex.EncodeToString(b[:])
}

// faultsDatabase reports whether the schedule makes the ledger's database
// unavailable for a while: a failover, or any PostgreSQL fault.
func (s Schedule) faultsDatabase() bool {
	if s.Failover {
		return true
	}
	for _, e := range s.Events {
		for _, k := range faultKinds {
			if k.name == e.Kind && k.postgres {
				return true
			}
		}
	}
	return false
}
