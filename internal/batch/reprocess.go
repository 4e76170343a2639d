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
	"lhrelay/internal/wire"
)

// ReprocessConfig is what reprocess needs.
type ReprocessConfig struct {
	// MaxAttempts: only rows with attempts < MaxAttempts are resent.
	MaxAttempts int
	DryRun      bool
	Now         time.Time
	Out         io.Writer // the dry run's listing
	Progress    io.Writer // a terminal for progress, or nil
	Log         *slog.Logger
}

// Reprocess resends the requests that definitely never reached the core:
// rows in FAILED with E902 and fewer than MaxAttempts attempts. Each is
// re-claimed (SENT, attempts+1) with a conditional update that also checks
// the attempt limit, then sent with its stored request and GUID through the
// same core client and recording as the relay. UNKNOWN rows are never
// selected: their transfer may have been posted.
//
// A row the relay re-claimed first is counted "skipped". A resend that
// again cannot connect leaves the row FAILED/E902 for the next run and
// makes the run end with ErrCoreUnreachable.
func Reprocess(ctx context.Context, l *ledger.Ledger, core *corecall.Client, cfg ReprocessConfig) (*Summary, error) {
	s := NewSummary("reprocess", "selected", "skipped")
	s.DryRun = cfg.DryRun
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := ledger.Filter{
		States:      []ledger.State{ledger.StateFailed},
		RspCode:     string(generated.SourceConnectFail.Code()),
		MaxAttempts: cfg.MaxAttempts,
	}
	seen := map[string]struct{}{}
	if cfg.DryRun {
		err := scanOnce(ctx, l, f, seen, func(r ledger.Row) error {
			s.Add("selected")
			fmt.Fprintf(cfg.Out, "would resend %s %s (attempt %d of at most %d)\n", r.GUID, r.TxCode, r.Attempts+1, cfg.MaxAttempts-1)
			return nil
		})
		if err != nil {
			return s, fmt.Errorf("reprocess: %w", err)
		}
		return s, nil
	}
	total, err := countAll(ctx, l, f)
	if err != nil {
		return s, fmt.Errorf("reprocess: %w", err)
	}
	p := NewProgress(cfg.Progress, "reprocess", total)
	defer p.Finish()
	err = scanOnce(ctx, l, f, seen, func(row ledger.Row) error {
		s.Add("selected")
		outcome, err := resendRow(ctx, l, core, row, cfg)
		s.Add(outcome)
		p.Step()
		if err != nil {
			return fmt.Errorf("%s: %w", row.GUID, err)
		}
		log.Info("row resent", "guid", row.GUID, "outcome", outcome)
		return nil
	})
	if err != nil {
		return s, fmt.Errorf("reprocess: %w", err)
	}
	if s.Count(string(generated.SourceConnectFail.Code())) > 0 {
		return s, ErrCoreUnreachable
	}
	return s, nil
}

// resendRow re-claims and sends one row; the outcome is the response code
// recorded, or "skipped".
func resendRow(ctx context.Context, l *ledger.Ledger, core *corecall.Client, row ledger.Row, cfg ReprocessConfig) (string, error) {
	r, err := wire.ParseRequest(row.Request)
	if err != nil {
		// The relay stored it after validating it; a row this binary
		// cannot decode (a newer relay's transaction, a changed layout)
		// is left for a person.
		return refusedOutcome(err), nil
	}
	if _, err := l.ReclaimBelow(ctx, row.GUID, cfg.MaxAttempts); err != nil {
		if errors.Is(err, ledger.ErrStateChanged) {
			return "skipped", nil
		}
		return "", err
	}
	res := core.Call(ctx, r.Tx, row.GUID, r.Body)
	rec, _ := outcome.OfCall(nil, &r.Header, res, cfg.Now)
	if err := l.Finish(context.WithoutCancel(ctx), row.GUID, rec); err != nil {
		return "", fmt.Errorf("recording %s: %w (the row stays SENT for resolve --stale-sent)", rec.RspCode, err)
	}
	return rec.RspCode, nil
}
