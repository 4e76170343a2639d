// Package settle runs resolve's rules (SPEC §7) inside the relay, every few
// seconds, so that unknown outcomes are settled without an operator's
// scheduler (SPEC §5.11): a SLOW transfer answered E901 becomes DONE by
// itself once the core can say it was posted, and the channel's retry gets
// the real answer. A round is batch.Resolve, the same code as the resolve
// command, not a second implementation of its rules. It never resends:
// reprocess stays an operator's decision, because a channel told E902 may
// have given up on the transfer.
//
// Settling must never delay frames: a round looks up a few rows at once
// (InFlight, through batch.Pace as resolve does), each lookup admitted by
// the relay's own admission (Limiter) only while it has room beside the
// frames' calls, so that the core's bound counts the lookups too and a
// frame never waits behind one; through its own core client (its own
// connections and timeouts, so a slow lookup holds none of the frames'
// connections); and it is skipped while the relay's breaker says the core
// is down. With several
// relays on one ledger, a round takes the ledger's "settle" lock first: one
// relay does the round, the others skip it, so each row is looked up once
// per round.
package settle

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"lhrelay/internal/admit"
	"lhrelay/internal/batch"
	"lhrelay/internal/corecall"
	"lhrelay/internal/ledger"
)

// Defaults of the relay's flags.
const (
	DefaultEvery     = 30 * time.Second
	DefaultMinAge    = 60 * time.Second
	DefaultStaleSent = 600 * time.Second
	// DefaultInFlight is the rows a round looks up at once: an outage's
	// unknowns are settled within minutes, and the frames' calls keep
	// nearly all of the core's slots.
	DefaultInFlight = 4
)

// lockName is the ledger lock a round holds.
const lockName = "settle"

// Config configures a Settler.
type Config struct {
	Ledger *ledger.Ledger
	// Core makes the lookups; give the settler a client of its own.
	Core *corecall.Client
	// Every is the time between rounds.
	Every time.Duration
	// MinAge and StaleSent are resolve's --min-age and --stale-sent.
	// StaleSent must be longer than any core call a relay on this ledger
	// may still be making, or a row in flight would be looked up.
	MinAge, StaleSent time.Duration
	// TrustLookup404 is the operator's word (--trust-lookup-404) that the
	// core's lookup 404s mean never posted, unchecked
	// (batch.LookupGuard's TrustNotFound).
	TrustLookup404 bool
	// Limiter is the relay's admission (SPEC 5.12); a round's lookups
	// take its slots only while it has room. Nil: the round's own bound
	// (InFlight) only.
	Limiter *admit.Limiter
	// InFlight is the rows a round looks up at once; 0: DefaultInFlight.
	InFlight int
	// CoreDown reports whether the core is known to be unreachable (the
	// relay's breaker is open); a round is skipped while it is. Nil: never.
	CoreDown func() bool
	// Metrics receives each round's outcome; nil: none.
	Metrics Metrics
	Log     *slog.Logger
}

// Metrics is what a settler reports; *metrics.Metrics implements it.
type Metrics interface {
	// SettleRound reports a round: its result, how long it took, when it
	// ended, and (for a round that ran) its summary.
	SettleRound(result Result, took time.Duration, end time.Time, s *batch.Summary)
}

// Result is what became of one round.
type Result string

// The results of a round.
const (
	// Ran: this relay held the lock and ran resolve's rules.
	Ran Result = "ran"
	// Locked: another relay on the ledger holds the round's lock and is
	// settling.
	Locked Result = "locked"
	// CoreDown: skipped, the breaker says the core cannot be reached.
	CoreDown Result = "core_down"
	// Failed: the round could not run or ended early (the ledger failed).
	Failed Result = "failed"
)

// Results lists every Result, for metrics that show each from the start.
var Results = []Result{Ran, Locked, CoreDown, Failed}

// trustFor is how long a settler trusts a transaction's lookup 404s once
// its route was shown to be served (batch.LookupGuard): the check costs a
// lookup or two, so not every round, but a core moved meanwhile is caught
// within minutes.
const trustFor = 5 * time.Minute

// Settler runs settling rounds.
type Settler struct {
	cfg   Config
	guard *batch.LookupGuard
}

// New checks cfg and returns a Settler.
func New(cfg Config) (*Settler, error) {
	switch {
	case cfg.Ledger == nil || cfg.Core == nil:
		return nil, errors.New("settle: a ledger and a core client are required")
	case cfg.Every <= 0 || cfg.MinAge < 0 || cfg.StaleSent < 0:
		return nil, errors.New("settle: the interval must be more than 0, the ages not negative")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.TrustLookup404 {
		cfg.Log.Warn("settling with --trust-lookup-404: every lookup answering 404 settles its row as never posted, unchecked; a wrong --core would make posted transfers resendable")
	}
	return &Settler{cfg: cfg, guard: &batch.LookupGuard{TTL: trustFor, TrustNotFound: cfg.TrustLookup404}}, nil
}

func (s *Settler) inFlight() int {
	if s.cfg.InFlight > 0 {
		return s.cfg.InFlight
	}
	return DefaultInFlight
}

// Run runs a round every Every until ctx ends, and returns once the round
// under way has stopped (a cancelled round stops between rows: the row
// being looked up stays as it was).
func (s *Settler) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Round(ctx)
		}
	}
}

// Round runs one round now and says what became of it; with Ran, the
// summary counts the rows by outcome (batch.Resolve's).
func (s *Settler) Round(ctx context.Context) (Result, *batch.Summary) {
	start := time.Now()
	result, sum, err := s.round(ctx, start)
	end := time.Now()
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.SettleRound(result, end.Sub(start), end, sum)
	}
	switch {
	case err != nil && errors.Is(err, batch.ErrLookupUnverified):
		// The core may be reached at the wrong path: only the operator
		// can fix that, and until then no row settles as never posted.
		s.cfg.Log.Error("settling: a lookup's 404 is not trusted; those rows are unchanged", "summary", sum.String(), "err", err)
	case err != nil && errors.Is(err, batch.ErrCoreUnreachable):
		s.cfg.Log.Warn("settling: some lookups failed; those rows are unchanged until a later round", "summary", sum.String(), "err", err)
	case err != nil:
		s.cfg.Log.Error("settling round failed", "result", string(result), "err", err)
	case result == Ran && sum.Count("selected") > 0:
		s.cfg.Log.Info("settling round", "summary", sum.String(), "took_ms", end.Sub(start).Milliseconds())
	}
	return result, sum
}

func (s *Settler) round(ctx context.Context, now time.Time) (Result, *batch.Summary, error) {
	if s.cfg.CoreDown != nil && s.cfg.CoreDown() {
		return CoreDown, nil, nil
	}
	release, ok, err := s.cfg.Ledger.TryExclusive(ctx, lockName)
	switch {
	case err != nil:
		return Failed, nil, err
	case !ok:
		return Locked, nil, nil
	}
	defer release()
	sum, err := batch.Resolve(ctx, s.cfg.Ledger, s.cfg.Core, batch.ResolveConfig{
		MinAge: s.cfg.MinAge, StaleSent: s.cfg.StaleSent, Now: now, Log: s.cfg.Log, Guard: s.guard,
		Pace: batch.Pace{MaxInFlight: s.inFlight(), Limiter: s.cfg.Limiter, Yield: true},
	})
	if err != nil && !errors.Is(err, batch.ErrCoreUnreachable) {
		return Failed, sum, err
	}
	return Ran, sum, err
}
