package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"lhrelay/internal/admit"
	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/outcome"
	"lhrelay/internal/plant"
	"lhrelay/internal/wire"
)

// ResolveConfig is what resolve needs.
type ResolveConfig struct {
	// MinAge: only UNKNOWN rows last updated at least this long ago, so a
	// transfer the core is still posting is not looked up too early.
	// Ages are measured by the database's clock (ledger.Filter.OlderThan).
	MinAge time.Duration
	// StaleSent: SENT rows last updated at least this long ago were
	// orphaned by a relay that died mid-call; they are settled the same
	// way. Zero turns this off.
	StaleSent time.Duration
	// Now is the relay's clock for the SENT_AT of the response frames
	// built; it selects nothing.
	Now time.Time
	// GUIDs, when not empty: only the rows of these GUIDs (an operator
	// settling the rows they are looking at).
	GUIDs []string
	// Guard decides whether a lookup's 404 may settle a row (see
	// LookupGuard); nil: a fresh one for this run.
	Guard *LookupGuard
	// Pace: how many rows at once, how fast, through which admission.
	Pace     Pace
	Progress func(Progress) // called after each row and at the end; nil: not reported
	Log      *slog.Logger
}

// Resolve settles UNKNOWN rows (and stale SENT rows) by the rule of each
// row's own transaction (SPEC §2, §7). It never POSTs.
//
//   - A transaction with a lookup is asked with it (for BKTR0001, GET
//     /v1/transfers/{guid}). 200: posted; the row becomes DONE with 0000
//     and a response frame built from the stored request's header and the
//     body the core returned, so a retry of the GUID replays it. 404:
//     never posted; the row becomes FAILED with E902, which makes it safe
//     to resend. Anything else: the row is left unchanged (counted
//     "unreachable"). When the core could not be reached (no answer, or
//     a status saying it is unavailable), the run stops there as
//     reprocess does: it begins no new row, lets the rows in flight
//     finish, counts the rest "not_tried" (unchanged) and ends with
//     ErrCoreUnreachable; looking up the rest of an outage's rows in a
//     core that is not there would only wait out a timeout per row. When
//     the core answered, but with nothing that settles the row (another
//     status, a body about another GUID: corecall.ErrUnusableAnswer),
//     the run goes on, so that one row the core answers wrongly cannot
//     hold every row behind it, and ends with ErrCoreUnreachable too.
//   - A transaction declared "lookup none" (a read) becomes FAILED E902
//     without a core call: sending it again is harmless.
//   - A row whose TX_CODE this binary does not know (written by a newer
//     relay) is left unchanged and counted "unknown_tx"; one whose stored
//     request no longer decodes, "undecodable". Neither is guessed at.
//
// Each transition is conditional on the state the row was selected in: a
// row the relay settled in the meantime is counted "skipped". Rows go
// oldest first by their first claim, many at a time (cfg.Pace).
func Resolve(ctx context.Context, l *ledger.Ledger, core *corecall.Client, cfg ResolveConfig) (*Summary, error) {
	s := NewSummary("resolve", append([]string{"selected"}, ResolveOutcomes...)...)
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Ages by the database's clock, the one that stamped updated_at
	// (SPEC 6a): a host whose clock runs ahead must not look up a call
	// still under way.
	selections := []ledger.Filter{{States: []ledger.State{ledger.StateUnknown}, OlderThan: cfg.MinAge, GUIDs: cfg.GUIDs}}
	if cfg.StaleSent > 0 {
		selections = append(selections, ledger.Filter{States: []ledger.State{ledger.StateSent}, OlderThan: cfg.StaleSent, GUIDs: cfg.GUIDs})
	}
	if plant.On(plant.SettleClockAhead) {
		for i := range selections {
			selections[i].UpdatedBefore = time.Now().Add(10*time.Minute - selections[i].OlderThan)
			selections[i].OlderThan = 0
		}
	}
	total, err := countAll(ctx, l, selections...)
	if err != nil {
		return s, fmt.Errorf("resolve: %w", err)
	}
	p := newPacer(cfg.Pace)
	st := newResolveState(l, core, cfg.Guard, cfg.Now)
	st.log, st.pacer, st.withdraw = log, p, true
	pr := &progress{fn: cfg.Progress, total: total, s: s}
	err = runScans(ctx, l, p, selections, func(row ledger.Row) {
		if p.stopping.Load() {
			return // begun as the run stopped: not tried
		}
		outcome, err := st.resolveRow(ctx, row)
		if outcome == outcomeWithdrawn {
			return // the run stopped before it changed anything: not tried
		}
		s.Add("selected")
		if outcome != "" { // "" comes with the ledger's error, which stops the run
			s.Add(outcome)
		}
		pr.row()
		switch {
		case outcome == OutcomeUnverified:
			log.Warn("lookup answered 404, which is not trusted; row unchanged", "guid", row.GUID, "state", row.State, "err", err)
		case outcome == outcomeUnreachable && errors.Is(err, corecall.ErrUnusableAnswer):
			log.Warn("core's lookup answer settles nothing; row unchanged", "guid", row.GUID, "state", row.State, "err", err)
			p.unsettled(row, err)
		case outcome == outcomeUnreachable:
			log.Warn("core lookup failed; row unchanged, run stopped", "guid", row.GUID, "state", row.State, "err", err)
			p.haltAt(row, err)
		case outcome == outcomeUnknownTx || outcome == outcomeUndecodable:
			log.Warn("stored request not settled by this binary; row unchanged", "guid", row.GUID, "state", row.State, "tx", row.TxCode, "err", err)
		case err != nil:
			p.stop(fmt.Errorf("%s: %w", row.GUID, err))
		default:
			log.Info("row settled", "guid", row.GUID, "from", row.State, "outcome", outcome)
		}
	})
	pr.end()
	if err != nil {
		return s, fmt.Errorf("resolve: %w", err)
	}
	h := p.halted()
	if h != nil {
		s.AddN(outcomeNotTried, max(total-s.Count("selected"), 0))
	}
	if n := s.Count(OutcomeUnverified); n > 0 {
		return s, fmt.Errorf("resolve: %d rows unchanged: %w", n, st.firstRefusal)
	}
	if h != nil {
		return s, fmt.Errorf("%w: stopped at %s, whose lookup settled nothing (%w); %d rows are unchanged for want of an answer and %d other selected rows were not tried: run resolve again later",
			ErrCoreUnreachable, h.row.GUID, h.lookupErr, s.Count(outcomeUnreachable), s.Count(outcomeNotTried))
	}
	if u := p.firstUnusable(); u != nil {
		return s, unusableErr(u, s.Count(outcomeUnreachable))
	}
	return s, nil
}

// unusableErr is the error of a run that went through its rows but left n
// unchanged because the core answered their lookups with nothing usable,
// the first of them u: it matches ErrCoreUnreachable, since those rows
// wait for the core as an unreachable core's do (SPEC 7: exit 1).
func unusableErr(u *halt, n int) error {
	return fmt.Errorf("%w for %d rows, which are unchanged: the core answered their lookups with nothing that settles them (the first, %s: %w); run again later",
		ErrCoreUnreachable, n, u.row.GUID, u.lookupErr)
}

// resolveRow settles one row. It returns the outcome counted in the
// summary; an error with "unreachable" is the core's, with unknown_tx or
// undecodable the stored request's, any other error the ledger's.
func (st *resolveState) resolveRow(ctx context.Context, row ledger.Row) (string, error) {
	l, now := st.l, st.now
	r, err := wire.ParseRequest(row.Request)
	if err != nil {
		return refusedOutcome(err), fmt.Errorf("stored request: %w", err)
	}
	var rec ledger.Outcome
	switch r.Tx.Settle {
	case generated.SettleAsNotPosted:
		rec = outcome.NotPosted(&r.Header, now)
	default:
		var fail string
		if rec, fail, err = st.lookUp(ctx, row.GUID, &r); fail != "" || err != nil {
			return fail, err
		}
	}
	if row.State == ledger.StateSent {
		rec.Why.Reason = "stale SENT, " + rec.Why.Reason
	}
	err = l.Transition(ctx, row.GUID, row.State, rec)
	switch {
	case errors.Is(err, ledger.ErrStateChanged):
		return outcomeSkipped, nil
	case err != nil:
		return "", err
	case rec.State == ledger.StateDone:
		return "done", nil
	}
	return "failed", nil
}

// lookUp asks the core, with the lookup r's transaction declares, whether
// it posted r (sent with GUID guid), and returns the outcome that settles
// the row on the core's word: DONE/0000 with the response frame built from
// a 200 about this GUID, or FAILED/E902 from a 404 the guard trusts. When
// the answer settles nothing, fail names why ("unreachable": no usable
// answer; OutcomeUnverified: a 404 the guard does not trust) and err says
// how; an err with fail "" is the ledger's.
func (st *resolveState) lookUp(ctx context.Context, guid string, r *wire.Request) (rec ledger.Outcome, fail string, err error) {
	c, err := st.pacer.admit(ctx, st.withdraw)
	if errors.Is(err, errStopping) {
		return rec, outcomeWithdrawn, err
	} else if err != nil {
		return rec, outcomeUnreachable, err
	}
	start := time.Now()
	found, err := st.core.Lookup(ctx, r.Tx, guid, r.Body)
	c.done(lookupSample(err, time.Since(start)), time.Since(start))
	if err != nil {
		return rec, outcomeUnreachable, err
	}
	if found.Posted {
		st.guard.trust(r.Tx.Code)
	} else if err := st.checkNotFound(ctx, r.Tx, r.Body); err != nil {
		switch {
		case isUnverified(err):
			return rec, OutcomeUnverified, err
		case errors.Is(err, ErrCoreUnreachable):
			return rec, outcomeUnreachable, err
		}
		return rec, "", err
	}
	rec, ok := outcome.OfLookup(&r.Header, found, st.now)
	if !ok {
		return rec, outcomeUnreachable, fmt.Errorf("the %s lookup's answer does not fit a response frame", r.Tx.Code)
	}
	return rec, "", nil
}

// resolveState is what one Resolve run keeps between rows; a reprocess
// run keeps one too, for the lookup it makes before each resend.
type resolveState struct {
	l     *ledger.Ledger
	core  *corecall.Client
	guard *LookupGuard
	now   time.Time
	log   *slog.Logger
	// pacer admits the run's core calls; withdraw: a lookup still
	// waiting to be admitted when the run stops gives its row up, not
	// tried (reprocess, which stops at an unreachable core).
	pacer    *pacer
	withdraw bool
	// checking serialises the guard's check: the rows in flight that
	// meet their transaction's first 404 together make one check, not
	// one each.
	checking sync.Mutex
	// refused: the guard's refusal of a transaction's 404s, asked once
	// per run; firstRefusal the first, for the run's error. Under
	// checking.
	refused      map[string]error
	firstRefusal error
}

// newResolveState is the state of one run; a nil guard is a fresh one,
// for this run alone.
func newResolveState(l *ledger.Ledger, core *corecall.Client, guard *LookupGuard, now time.Time) *resolveState {
	if guard == nil {
		guard = &LookupGuard{}
	}
	return &resolveState{l: l, core: core, guard: guard, refused: map[string]error{}, now: now, log: slog.New(slog.DiscardHandler), pacer: newPacer(Pace{})}
}

// checkNotFound returns nil when a 404 of tx may settle a row, else why not
// (LookupGuard.check). A refusal is kept for the rest of the run, until a
// lookup of tx answers 200: from then on tx's route is trusted.
func (st *resolveState) checkNotFound(ctx context.Context, tx *generated.Transaction, body generated.RequestBody) error {
	if st.guard.TrustNotFound || st.guard.trustedNow(tx.Code) {
		return nil
	}
	st.checking.Lock()
	defer st.checking.Unlock()
	if err, ok := st.refused[tx.Code]; ok && !st.guard.trustedNow(tx.Code) {
		return err
	}
	// The check's own calls (a lookup, two probes, one after the other)
	// take one slot of the run's admission.
	c, err := st.pacer.admit(ctx, false)
	if err != nil {
		return fmt.Errorf("%w to check %s lookups answering 404: %w", ErrCoreUnreachable, tx.Code, err)
	}
	err = st.guard.check(ctx, st.l, st.core, tx, body, st.log)
	c.done(admit.Ignored, 0)
	if isUnverified(err) {
		st.refused[tx.Code] = err
		if st.firstRefusal == nil {
			st.firstRefusal = err
		}
	}
	return err
}

// ResolveOutcomes are the outcomes a resolved row is counted under, in the
// summary's order (after "selected").
var ResolveOutcomes = []string{"done", "failed", outcomeUnreachable, outcomeSkipped, outcomeUnknownTx, outcomeUndecodable}

// Outcomes shared by resolve and reprocess.
const (
	// outcomeUnreachable: the core gave no usable answer about the row,
	// which is unchanged.
	outcomeUnreachable = "unreachable"
	// outcomeSkipped: another process changed the row after it was
	// selected; it is left to them.
	outcomeSkipped = "skipped"
	// outcomeNotTried: selected rows left untouched because the run
	// stopped at a row the core could not be reached for. Always in
	// reprocess's summary; in resolve's when the run stopped.
	outcomeNotTried = "not_tried"
)

// outcomeWithdrawn is a row that the run, stopping, gave up before it
// changed anything: it is counted among the rows not tried, under no
// outcome of its own.
const outcomeWithdrawn = "withdrawn"

// Outcomes of a row whose stored request this binary cannot act on; the
// row is left unchanged for a person (or a newer binary).
const (
	outcomeUnknownTx   = "unknown_tx"
	outcomeUndecodable = "undecodable"
)

// refusedOutcome names why wire.ParseRequest refused a stored request.
func refusedOutcome(err error) string {
	var re *wire.RefusedError
	if errors.As(err, &re) && re.Source == generated.SourceUnknownTx {
		return outcomeUnknownTx
	}
	return outcomeUndecodable
}
