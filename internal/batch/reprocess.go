package batch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/outcome"
	"lhrelay/internal/plant"
	"lhrelay/internal/wire"
)

// ReprocessConfig is what reprocess needs.
type ReprocessConfig struct {
	// MaxAttempts: only rows with attempts < MaxAttempts are resent.
	MaxAttempts int
	DryRun      bool
	Now         time.Time
	Out         io.Writer // the dry run's listing
	// Pace: how many rows at once, how fast, through which admission.
	Pace     Pace
	Progress func(Progress) // called after each row and at the end; nil: not reported
	Log      *slog.Logger
	// Guard decides whether the lookup made before each resend, answering
	// 404, shows the row never posted (see LookupGuard); nil: a fresh one
	// for this run.
	Guard *LookupGuard
}

// Reprocess resends the requests that definitely never reached the core:
// rows in FAILED with E902 and fewer than MaxAttempts attempts. UNKNOWN
// rows are never selected: their transfer may have been posted.
//
// FAILED/E902 is not always "never sent": a lookup that came too early (a
// settling age shorter than the core's slowest posting) settles a row
// whose call is still under way, and the relay's recording of the core's
// late answer over it is lost if the relay dies first. So each row is
// first looked up at the core, by the same rule and 404 guard as resolve
// (a transaction declared "lookup none", a read, is sent without it:
// sending a read again is harmless):
//
//   - 200 about this GUID: the core posted it. The row becomes DONE/0000
//     with the response built from the lookup, as resolve settles an
//     UNKNOWN row, by a transition conditional on FAILED and the attempts
//     it was selected with; it is not sent (counted "posted_already").
//   - 404 the guard trusts: it is re-claimed (SENT, attempts+1) with a
//     conditional update that also checks the attempt limit, then sent
//     with its stored request and GUID through the same core client and
//     recording as the relay.
//   - Anything else (no answer, another status, an answer about another
//     GUID, an untrusted 404): the core cannot tell, so the row is left
//     as it is and the run stops there, as below.
//
// A row the relay (or another run) re-claimed first is counted "skipped".
// Rows go oldest first by their first claim, many at a time (cfg.Pace).
// A row whose lookup the core answers with nothing that settles it (a
// status other than 200, 404 or one saying the core is unavailable, or a
// body about another GUID: corecall.ErrUnusableAnswer) is not sent and
// stays unchanged, and the run goes on; it ends matching
// ErrCoreUnreachable. When the core cannot be reached for a row (its
// lookup gets no answer, or its resend is E902 again), the run stops there: it begins no
// new row, and a row begun but not yet re-claimed is given up unchanged;
// the rows already re-claimed finish by the rules of one row (sent, and
// recorded as the relay records a call: E902 if it could not connect,
// E901 if it failed after). The stopping row is unchanged (or, if only its
// resend failed, has spent one attempt and stays FAILED/E902), every row
// not tried is untouched (counted "not_tried"), and the error, which
// matches ErrCoreUnreachable, says so. Sending the rest into the same
// outage would only spend their attempts until they drop out of the
// selection, abandoned without anyone deciding about them. A run starts
// with one row in flight (the pacer's slow start), so a run into an
// outage that is already there stops at its first row.
//
// Every run also counts the FAILED/E902 rows that have used up their
// attempts ("exhausted"): they are never selected again, so a person must
// decide about them (a channel told E902 may have given up; or send them
// with a higher --max-attempts).
func Reprocess(ctx context.Context, l *ledger.Ledger, core *corecall.Client, cfg ReprocessConfig) (*Summary, error) {
	s := NewSummary("reprocess", "selected", outcomeSkipped, outcomeNotTried, outcomeExhausted)
	s.DryRun = cfg.DryRun
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	resendable := ledger.Filter{
		States:      []ledger.State{ledger.StateFailed},
		RspCode:     string(generated.SourceConnectFail.Code()),
		MaxAttempts: cfg.MaxAttempts,
	}
	if plant.On(plant.ReprocessUnknown) || plant.On(plant.ReprocessReclaimUnknown) {
		resendable.States = append(resendable.States, ledger.StateUnknown)
		resendable.RspCode = ""
	}
	err := reprocess(ctx, l, core, cfg, resendable, s, log)
	// Counted after the run: a row whose resend failed again may just have
	// spent its last attempt.
	if n, cerr := exhausted(ctx, l, resendable); cerr != nil {
		err = errors.Join(err, fmt.Errorf("reprocess: counting exhausted rows: %w", cerr))
	} else {
		s.AddN(outcomeExhausted, n)
		if n > 0 {
			log.Warn("rows have used up their attempts and are never resent: decide about them", "exhausted", n, "max_attempts", cfg.MaxAttempts)
		}
	}
	return s, err
}

// Outcomes of reprocess's summary besides the response codes recorded.
const (
	// outcomeExhausted: FAILED/E902 rows with no attempts left.
	outcomeExhausted = "exhausted"
	// OutcomePostedAlready: rows the core's lookup showed posted, settled
	// DONE/0000 from the lookup and not sent again. Shown in the summary
	// when it happened.
	OutcomePostedAlready = "posted_already"
)

// reasonPostedAlready is the history's reason for a row reprocess found
// posted.
const reasonPostedAlready = "reprocess: lookup 200, posted already: not sent again"

func reprocess(ctx context.Context, l *ledger.Ledger, core *corecall.Client, cfg ReprocessConfig, f ledger.Filter, s *Summary, log *slog.Logger) error {
	f.ByFirstClaim = true
	if cfg.DryRun {
		err := l.Scan(ctx, f, func(r ledger.Row) error {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("stopped: %w", err)
			}
			s.Add("selected")
			fmt.Fprintf(cfg.Out, "would resend %s %s (attempt %d of at most %d)\n", r.GUID, r.TxCode, r.Attempts+1, cfg.MaxAttempts)
			return nil
		})
		if err != nil {
			return fmt.Errorf("reprocess: %w", err)
		}
		return nil
	}
	total, err := countAll(ctx, l, f)
	if err != nil {
		return fmt.Errorf("reprocess: %w", err)
	}
	p := newPacer(cfg.Pace)
	// One run's lookups share what they learn of the core (resolveState).
	st := newResolveState(l, core, cfg.Guard, cfg.Now)
	st.log, st.pacer, st.withdraw = log, p, true
	pr := &progress{fn: cfg.Progress, total: total, s: s}
	err = runScans(ctx, l, p, []ledger.Filter{f}, func(row ledger.Row) {
		if p.stopping.Load() {
			return // begun as the run stopped: not tried
		}
		outcome, err := resendRow(ctx, st, row, cfg)
		if outcome == outcomeWithdrawn {
			return // the run stopped before it changed anything: not tried
		}
		s.Add("selected")
		if outcome != "" { // "" comes with the ledger's error, which stops the run
			s.Add(outcome)
		}
		pr.row()
		switch {
		case outcome == outcomeUnreachable && errors.Is(err, corecall.ErrUnusableAnswer):
			log.Warn("lookup before the resend answered nothing that settles the row; row unchanged, not sent", "guid", row.GUID, "err", err)
			p.unsettled(row, err)
			return
		case outcome == outcomeUnreachable || outcome == OutcomeUnverified:
			log.Warn("lookup before the resend settled nothing; row unchanged, run stopped", "guid", row.GUID, "err", err)
			p.haltAt(row, err)
			return
		case err != nil:
			p.stop(fmt.Errorf("%s: %w", row.GUID, err))
			return
		case outcome == OutcomePostedAlready:
			log.Info("row posted already: settled from the lookup, not sent again", "guid", row.GUID)
			return
		}
		log.Info("row resent", "guid", row.GUID, "outcome", outcome)
		if outcome == string(generated.SourceConnectFail.Code()) {
			p.haltAt(row, nil)
		}
	})
	pr.end()
	if err != nil {
		return fmt.Errorf("reprocess: %w", err)
	}
	if h := p.halted(); h != nil {
		notTried := max(total-s.Count("selected"), 0)
		s.AddN(outcomeNotTried, notTried)
		if h.lookupErr != nil {
			return fmt.Errorf("%w: stopped at %s, whose lookup could not tell whether the core posted it, so it was not sent and is unchanged (%w); %d other selected rows were not tried and are unchanged",
				ErrCoreUnreachable, h.row.GUID, h.lookupErr, notTried)
		}
		return fmt.Errorf("%w: stopped at %s, whose resend could not reach it (it spent attempt %d of at most %d and stays FAILED %s); %d other selected rows were not tried and are unchanged",
			ErrCoreUnreachable, h.row.GUID, h.row.Attempts+1, cfg.MaxAttempts, generated.SourceConnectFail.Code(), notTried)
	}
	if u := p.firstUnusable(); u != nil {
		return unusableErr(u, s.Count(outcomeUnreachable))
	}
	return nil
}

// exhausted counts the FAILED/E902 rows that resendable no longer selects
// because they have used up their attempts.
func exhausted(ctx context.Context, l *ledger.Ledger, resendable ledger.Filter) (int, error) {
	all := resendable
	all.MaxAttempts = 0
	n, err := l.Count(ctx, all)
	if err != nil {
		return 0, err
	}
	below, err := l.Count(ctx, resendable)
	if err != nil {
		return 0, err
	}
	return n - below, nil
}

// resendRow looks one row up at the core and, unless the core posted it
// or cannot tell, re-claims and sends it. The outcome is the response code
// recorded, OutcomePostedAlready, "skipped", or, with the lookup's error,
// "unreachable" or OutcomeUnverified (the row unchanged).
func resendRow(ctx context.Context, st *resolveState, row ledger.Row, cfg ReprocessConfig) (string, error) {
	l, core := st.l, st.core
	r, err := wire.ParseRequest(row.Request)
	if err != nil {
		// The relay stored it after validating it; a row this binary
		// cannot decode (a newer relay's transaction, a changed layout)
		// is left for a person.
		return refusedOutcome(err), nil
	}
	if row.State == ledger.StateUnknown && plant.On(plant.ReprocessUnknown) {
		// The history needs a reason, or the ledger refuses the change
		// and the plant would plant nothing.
		if err := l.Transition(ctx, row.GUID, ledger.StateUnknown, ledger.Outcome{State: ledger.StateFailed, RspCode: string(generated.SourceConnectFail.Code()),
			Why: ledger.Why{Reason: "planted: an UNKNOWN row taken for resending"}}); err != nil {
			return "", fmt.Errorf("planted reprocess-unknown: %w", err)
		}
	} else if r.Tx.Settle == generated.SettleByLookup {
		// The row was selected a page ago: another run or the relay
		// (the channel's retry) may have re-claimed and sent it since.
		// Its call is theirs to record: both changes below take the row
		// only as it was selected, so such a row is looked up in vain
		// and skipped (rare, and cheaper than a read of every row).
		from := ledger.StateFailed
		if plant.On(plant.ReprocessReclaimUnknown) {
			from = row.State // UNKNOWN too: the ledger's re-claim takes it (plant)
		}
		rec, fail, err := st.lookUp(ctx, row.GUID, &r)
		if fail != "" || err != nil {
			return fail, err
		}
		if rec.State == ledger.StateDone {
			// Posted, by the call that a too-early lookup settled
			// FAILED while it was under way: sending it again would
			// post it twice.
			rec.Why.Reason = reasonPostedAlready
			err := l.TransitionOfAttempts(ctx, row.GUID, from, row.Attempts, rec)
			switch {
			case errors.Is(err, ledger.ErrStateChanged):
				return outcomeSkipped, nil
			case err != nil:
				return "", err
			}
			return OutcomePostedAlready, nil
		}
	}
	// The last moment the row can be given up unchanged: once
	// re-claimed it is in flight, and is sent and recorded however the
	// run ends. (Its call slot is taken after the re-claim, so that no
	// slot waits out a commit.)
	if st.pacer.stopping.Load() {
		return outcomeWithdrawn, nil
	}
	attempts, err := l.ReclaimSelected(ctx, row, cfg.MaxAttempts)
	var uc *ledger.UnconfirmedClaimError
	switch {
	case errors.As(err, &uc):
		return "", abandonReclaim(ctx, l, err, uc, &r, cfg)
	case errors.Is(err, ledger.ErrStateChanged):
		return outcomeSkipped, nil
	case err != nil:
		return "", err
	}
	var res corecall.Result
	if c, aerr := st.pacer.admit(ctx, false); aerr != nil {
		// ctx ended while the row waited for its slot: nothing sent, as
		// a call cut off before it connected.
		res = corecall.Result{Source: generated.SourceConnectFail, Err: fmt.Errorf("not sent: %w", aerr)}
	} else {
		res = core.Call(ctx, r.Tx, row.GUID, r.Body)
		c.done(callSample(res), res.Elapsed)
	}
	rec, _ := outcome.OfCall(nil, &r.Header, res, cfg.Now)
	if err := l.Finish(context.WithoutCancel(ctx), row.GUID, attempts, rec); err != nil {
		return "", fmt.Errorf("recording %s: %w (the row stays SENT for resolve --stale-sent)", rec.RspCode, err)
	}
	return rec.RspCode, nil
}

// abandonReclaim handles a re-claim whose commit was not confirmed, as the
// relay handles such a claim (SPEC 6): nothing is sent, and if the row
// turns out to exist, SENT with that re-claim's attempts and token, it is
// made FAILED/E902 as soon as the database answers again
// (ledger.AbandonUnconfirmed), so that neither the channel's resend nor
// the next reprocess waits for resolve --stale-sent. The run stops with
// the ledger's error either way: the database failed it.
func abandonReclaim(ctx context.Context, l *ledger.Ledger, err error, uc *ledger.UnconfirmedClaimError, r *wire.Request, cfg ReprocessConfig) error {
	rec := outcome.Answer(nil, &r.Header, generated.SourceConnectFail,
		ledger.Why{Reason: "reprocess: re-claim's commit not confirmed by the database; the core was not called: " + uc.Err.Error()}, cfg.Now)
	res, aerr := ledger.AbandonUnconfirmed(context.WithoutCancel(ctx), ctx.Done(), l, uc, rec, ledger.DefaultAbandonPolicy)
	switch res {
	case ledger.Abandoned:
		return fmt.Errorf("%w; not sent: its row was found committed and made FAILED %s (attempt %d spent)", err, rec.RspCode, uc.Attempts)
	case ledger.AbandonNoRow, ledger.AbandonLeftAlone:
		return fmt.Errorf("%w; not sent: the re-claim did not land (or its row was changed since), nothing to undo", err)
	}
	return fmt.Errorf("%w; not sent, and its row could not be made FAILED %s (%s: %v): if the re-claim committed, the row stays SENT for resolve --stale-sent", err, rec.RspCode, res, aerr)
}
