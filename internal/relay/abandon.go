package relay

import (
	"lhrelay/internal/ledger"
)

// abandon handles a claim answered E902 whose commit was not confirmed
// (SPEC 6): the row may exist, SENT with the claim's attempts and token,
// and nobody will call the core for it. Once the database answers again
// the row, if it is still exactly that, becomes FAILED/E902 (o), so that
// the channel's resend is served instead of refused E903 until settling
// (ledger.AbandonUnconfirmed, as reprocess does with its own re-claims).
// It runs in the background; a relay that stops meanwhile leaves the row
// to settling.
func (s *Server) abandon(uc *ledger.UnconfirmedClaimError, tx string, o ledger.Outcome) {
	guid, attempts := uc.GUID, uc.Attempts
	o.Response = append([]byte(nil), o.Response...)
	policy := ledger.DefaultAbandonPolicy
	policy.TryTimeout = s.ledgerTimeout
	go func() {
		res, err := ledger.AbandonUnconfirmed(s.lasting, s.base.Done(), s.ledger, uc, o, policy)
		switch res {
		case ledger.Abandoned:
			s.log.Warn("unconfirmed claim found committed; made FAILED/E902 so that the channel's resend is served", "guid", guid, "tx", tx, "attempts", attempts)
		case ledger.AbandonNoRow:
			s.log.Info("unconfirmed claim never landed: no row to abandon", "guid", guid, "tx", tx, "attempts", attempts)
		case ledger.AbandonLeftAlone:
			s.log.Info("unconfirmed claim: its row is not SENT with its attempts and token (settled or re-claimed since, or another claim's); left alone", "guid", guid, "tx", tx, "attempts", attempts, "err", err)
		case ledger.AbandonGaveUp:
			s.log.Error("unconfirmed claim not abandoned; if it committed, its row stays SENT for resolve --stale-sent", "guid", guid, "tx", tx, "attempts", attempts, "err", err)
		}
	}()
}
