package console

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"lhrelay/internal/ledger"
)

// guidView is a GUID's page: its row, its frames decoded, its history.
type guidView struct {
	GUID     string
	Row      *ledger.Row // nil: purged (only its history is left)
	Request  *frameView
	Response *frameView
	Timeline []entryView
	Picture  *picture
	// ChainOK: every entry verifies where it stands (CheckEntries);
	// Audit is the last whole audit, for what that does not cover.
	ChainOK bool
	Audit   AuditResult
	Masked  bool
}

// entryView is one entry of the timeline.
type entryView struct {
	ledger.Entry
	N       int    // 1, 2, … in time order
	Before  string // STATE/CODE, or "none"
	After   string
	Actor   string // what made the change: relay, resolve, reprocess, purge, …
	Late    bool   // a late answer or a conflict: a picture is drawn
	Check   ledger.EntryCheck
	Elapsed string // since the first entry
}

func side(s ledger.State, rsp string) string {
	switch {
	case s == "":
		return "none"
	case rsp == "":
		return string(s)
	}
	return string(s) + "/" + rsp
}

// lateOrConflict reports whether an entry records a late answer or a
// conflict, by the words the ledger writes for them.
func lateOrConflict(e ledger.Entry) bool {
	return strings.HasPrefix(e.Reason, ledger.ConflictReason) || strings.HasPrefix(e.Reason, "late answer")
}

func (s *Server) pageGUID(w http.ResponseWriter, r *http.Request) {
	guid := r.PathValue("guid")
	if !validGUID(guid) {
		s.fail(w, r, http.StatusBadRequest, "a GUID is 32 lowercase hex digits")
		return
	}
	ctx := r.Context()
	// Logged before it is read: an access that fails half-way was still
	// an access (PCI DSS 10.2.1).
	s.log.Info("console: guid viewed", "guid", guid, "who", whoOf(r), "remote", r.RemoteAddr, "accounts_shown", s.cfg.ShowAccounts)
	v := guidView{GUID: guid, Masked: !s.cfg.ShowAccounts}
	row, err := s.l.Get(ctx, guid)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
	case err != nil:
		s.log.Error("console: reading a row", "guid", guid, "err", err)
		s.fail(w, r, http.StatusInternalServerError, "the ledger could not be read")
		return
	default:
		v.Row = &row
		v.Request = decodeFrame("request", row.Request, true, s.cfg.ShowAccounts)
		if len(row.Response) > 0 {
			v.Response = decodeFrame("response", row.Response, false, s.cfg.ShowAccounts)
		}
	}
	es, err := s.l.History(ctx, guid)
	if err == nil {
		var checks []ledger.EntryCheck
		checks, err = s.l.CheckEntries(ctx, es)
		if err == nil {
			v.Timeline, v.ChainOK = timeline(es, checks)
		}
	}
	if err != nil {
		s.log.Error("console: reading a history", "guid", guid, "err", err)
		s.fail(w, r, http.StatusInternalServerError, "the ledger could not be read")
		return
	}
	if v.Row == nil && len(es) == 0 {
		s.fail(w, r, http.StatusNotFound, "no row and no history for GUID "+guid)
		return
	}
	v.Picture = draw(v.Timeline)
	_, v.Audit = s.currentOverview(ctx)
	s.render(w, r, http.StatusOK, "guid", "GUID "+guid, v)
}

func timeline(es []ledger.Entry, checks []ledger.EntryCheck) ([]entryView, bool) {
	ok := true
	out := make([]entryView, len(es))
	for i, e := range es {
		out[i] = entryView{Entry: e, N: i + 1, Before: side(e.StateBefore, e.RspBefore), After: side(e.StateAfter, e.RspAfter),
			Actor: e.Command, Late: lateOrConflict(e), Check: checks[i]}
		if i > 0 {
			out[i].Elapsed = "+" + e.At.Sub(es[0].At).Round(time.Millisecond).String()
		}
		ok = ok && checks[i].OK()
	}
	return out, ok
}
