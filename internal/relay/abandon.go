package relay

import (
	"context"
	"errors"
	"time"

	"lhrelay/internal/ledger"
)

// How long the relay keeps trying to abandon a claim whose commit was not
// confirmed, and the pauses between tries: long enough to outlast a
// database restart or a failover; past it, the row (if it exists) is left
// SENT for resolve --stale-sent, as before.
const (
	abandonFor      = 2 * time.Minute
	abandonFirstTry = 100 * time.Millisecond
	abandonMaxPause = 5 * time.Second
)

// abandon handles a claim answered E902 whose commit was not confirmed
// (SPEC 6): the row may exist, SENT with the claim's attempts and token, and nobody
// will call the core for it. Once the database answers again the row, if
// it is still exactly that, becomes FAILED/E902 (o), so that the channel's
// resend is served instead of refused E903 until settling. It runs in the
// background; a relay that stops meanwhile leaves the row to settling.
func (s *Server) abandon(uc *ledger.UnconfirmedClaimError, tx string, o ledger.Outcome) {
	guid, attempts := uc.GUID, uc.Attempts
	o.Response = append([]byte(nil), o.Response...)
	go func() {
		deadline := time.Now().Add(abandonFor)
		pause := abandonFirstTry
		for {
			ctx, cancel := context.WithTimeout(s.lasting, s.ledgerTimeout)
			err := s.ledger.AbandonClaim(ctx, guid, attempts, uc.Token, o)
			cancel()
			switch {
			case err == nil:
				s.log.Warn("unconfirmed claim found committed; made FAILED/E902 so that the channel's resend is served", "guid", guid, "tx", tx, "attempts", attempts)
				return
			case errors.Is(err, ledger.ErrNotFound) && time.Now().Add(pause).After(deadline):
				s.log.Info("unconfirmed claim never landed: no row to abandon", "guid", guid, "tx", tx, "attempts", attempts)
				return
			case errors.Is(err, ledger.ErrNotFound):
				// Not proof that it never lands: a COMMIT whose answer was
				// lost may still be under way on the server, or waiting
				// for a synchronous standby, and its row is invisible
				// until it is done. Look again.
			case errors.Is(err, ledger.ErrStateChanged):
				s.log.Info("unconfirmed claim: its row is not SENT with its attempts and token (settled or re-claimed since, or another claim's); left alone", "guid", guid, "tx", tx, "attempts", attempts, "err", err)
				return
			case errors.Is(err, ledger.ErrClosed) || time.Now().Add(pause).After(deadline):
				s.log.Error("unconfirmed claim not abandoned; if it committed, its row stays SENT for resolve --stale-sent", "guid", guid, "tx", tx, "attempts", attempts, "err", err)
				return
			}
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-s.base.Done():
				t.Stop()
				return
			}
			pause = min(2*pause, abandonMaxPause)
		}
	}()
}
