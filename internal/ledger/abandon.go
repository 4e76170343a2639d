package ledger

import (
	"context"
	"errors"
	"time"
)

// Abandoner is what AbandonUnconfirmed needs of a ledger; *Ledger
// implements it (the relay reaches its ledger through an interface).
type Abandoner interface {
	AbandonClaim(ctx context.Context, guid string, attempts int, token string, o Outcome) error
}

// AbandonPolicy bounds AbandonUnconfirmed's tries.
type AbandonPolicy struct {
	For        time.Duration // how long to keep trying
	FirstPause time.Duration // the pause after the first try; it doubles
	MaxPause   time.Duration // up to this
	TryTimeout time.Duration // each try's bound
}

// DefaultAbandonPolicy keeps trying long enough to outlast a database
// restart or a failover; past it, the row (if it exists) is left SENT for
// resolve --stale-sent.
var DefaultAbandonPolicy = AbandonPolicy{For: 2 * time.Minute, FirstPause: 100 * time.Millisecond, MaxPause: 5 * time.Second, TryTimeout: 30 * time.Second}

// AbandonResult is what became of an unconfirmed claim's row.
type AbandonResult string

// The results of AbandonUnconfirmed.
const (
	// Abandoned: the claim had committed; its row is now the outcome
	// given (FAILED/E902), so that the channel's resend is served.
	Abandoned AbandonResult = "abandoned"
	// AbandonNoRow: no row of the claim appeared within the bound: it
	// never landed.
	AbandonNoRow AbandonResult = "no row"
	// AbandonLeftAlone: the row is not SENT with the claim's attempts and
	// token (settled or re-claimed since, or another claim's).
	AbandonLeftAlone AbandonResult = "left alone"
	// AbandonGaveUp: the database did not answer within the bound, or the
	// ledger closed; if the claim committed, its row stays SENT for
	// resolve --stale-sent. The error says why.
	AbandonGaveUp AbandonResult = "gave up"
	// AbandonStopped: stop was closed between tries.
	AbandonStopped AbandonResult = "stopped"
)

// AbandonUnconfirmed is SPEC 6's rule for a claim whose commit was not
// confirmed and for which the core was not called (uc): if its row turns
// out to exist, still SENT with that claim's attempts and token, it
// becomes o (FAILED/E902) as soon as the database answers again. It tries
// AbandonClaim under ctx (each try bounded by p.TryTimeout), pausing
// between tries, until the question is settled, p.For has passed, or stop
// is closed. A missing row is looked for again until the bound: a COMMIT
// whose answer was lost may still be under way on the server, or waiting
// for a synchronous standby, and its row is invisible until it is done.
func AbandonUnconfirmed(ctx context.Context, stop <-chan struct{}, l Abandoner, uc *UnconfirmedClaimError, o Outcome, p AbandonPolicy) (AbandonResult, error) {
	deadline := time.Now().Add(p.For)
	pause := p.FirstPause
	for {
		tctx, cancel := context.WithTimeout(ctx, p.TryTimeout)
		err := l.AbandonClaim(tctx, uc.GUID, uc.Attempts, uc.Token, o)
		cancel()
		last := time.Now().Add(pause).After(deadline)
		switch {
		case err == nil:
			return Abandoned, nil
		case errors.Is(err, ErrNotFound) && last:
			return AbandonNoRow, nil
		case errors.Is(err, ErrNotFound):
		case errors.Is(err, ErrStateChanged):
			return AbandonLeftAlone, err
		case errors.Is(err, ErrClosed) || last:
			return AbandonGaveUp, err
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return AbandonStopped, nil
		}
		pause = min(2*pause, p.MaxPause)
	}
}
