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

// ResolveConfig is what resolve needs.
type ResolveConfig struct {
	// MinAge: only UNKNOWN rows last updated at least this long ago, so a
	// transfer the core is still posting is not looked up too early.
	MinAge time.Duration
	// StaleSent: SENT rows last updated at least this long ago were
	// orphaned by a relay that died mid-call; they are settled the same
	// way. Zero turns this off.
	StaleSent time.Duration
	Now       time.Time
	Progress  io.Writer // a terminal for progress, or nil
	Log       *slog.Logger
}

// Resolve settles UNKNOWN rows (and stale SENT rows) by asking the core
// whether the transfer was posted: GET /v1/transfers/{guid}. It never POSTs.
//
//   - 200: the transfer was posted. The row becomes DONE with 0000 and a
//     response frame built from the stored request's header and the body
//     the core returned, so a retry of the GUID replays it.
//   - 404: the core has no transfer with that GUID: it never posted, and
//     the row becomes FAILED with E902, which makes it safe to resend.
//   - anything else: the row is left unchanged (counted "unreachable") and
//     the run ends with ErrCoreUnreachable.
//
// Each transition is conditional on the state the row was selected in: a
// row the relay settled in the meantime is counted "skipped".
func Resolve(ctx context.Context, l *ledger.Ledger, core *corecall.Client, cfg ResolveConfig) (*Summary, error) {
	s := NewSummary("resolve", "selected", "done", "failed", "unreachable", "skipped")
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	selections := []ledger.Filter{{States: []ledger.State{ledger.StateUnknown}, UpdatedBefore: cfg.Now.Add(-cfg.MinAge)}}
	if cfg.StaleSent > 0 {
		selections = append(selections, ledger.Filter{States: []ledger.State{ledger.StateSent}, UpdatedBefore: cfg.Now.Add(-cfg.StaleSent)})
	}
	total, err := countAll(ctx, l, selections...)
	if err != nil {
		return s, fmt.Errorf("resolve: %w", err)
	}
	p := NewProgress(cfg.Progress, "resolve", total)
	defer p.Finish()
	seen := map[string]struct{}{}
	for _, f := range selections {
		err := scanOnce(ctx, l, f, seen, func(row ledger.Row) error {
			s.Add("selected")
			outcome, err := resolveRow(ctx, l, core, row, cfg.Now)
			s.Add(outcome)
			p.Step()
			switch {
			case outcome == "unreachable":
				log.Warn("core lookup failed; row unchanged", "guid", row.GUID, "state", row.State, "err", err)
			case err != nil:
				return fmt.Errorf("%s: %w", row.GUID, err)
			default:
				log.Info("row settled", "guid", row.GUID, "from", row.State, "outcome", outcome)
			}
			return nil
		})
		if err != nil {
			return s, fmt.Errorf("resolve: %w", err)
		}
	}
	if s.Count("unreachable") > 0 {
		return s, ErrCoreUnreachable
	}
	return s, nil
}

// resolveRow looks one row up and moves it. It returns the outcome counted
// in the summary; an error with "unreachable" is the core's, any other error
// the ledger's.
func resolveRow(ctx context.Context, l *ledger.Ledger, core *corecall.Client, row ledger.Row, now time.Time) (string, error) {
	var h generated.Header
	if len(row.Request) < generated.HeaderLen {
		return "skipped", fmt.Errorf("stored request of %d bytes has no header", len(row.Request))
	}
	if err := h.Decode(string(row.Request[:generated.HeaderLen])); err != nil {
		return "skipped", fmt.Errorf("stored request: %w", err)
	}
	found, body, err := core.LookupTransfer(ctx, row.GUID)
	if err != nil {
		return "unreachable", err
	}
	src, result := generated.SourceConnectFail, "failed"
	var rspBody generated.ResponseBody
	if found {
		src, result = generated.SourceHTTP200, "done"
		rspBody = body
	}
	rsp, err := wire.AppendResponse(nil, &h, src.Code(), rspBody, now)
	if err != nil {
		return "unreachable", fmt.Errorf("building the response frame: %w", err)
	}
	err = l.Transition(ctx, row.GUID, row.State, outcome.Of(src, rsp))
	if errors.Is(err, ledger.ErrStateChanged) {
		return "skipped", nil
	}
	return result, err
}
