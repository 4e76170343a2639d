package ledger

import (
	"context"
	"fmt"
)

// TransitionOfAttempts is Transition that also requires the row's attempts
// to be exactly attempts, in the same conditional UPDATE: a batch command
// that decided about a row as it selected it (its state and attempts) and
// asked the core in between changes it only if nobody re-claimed it
// meanwhile. A row in another state, with other attempts, or missing
// changes nothing: the error is a *StateError matching ErrStateChanged
// (and ErrReclaimed when the row was re-claimed since).
func (l *Ledger) TransitionOfAttempts(ctx context.Context, guid string, from State, attempts int, o Outcome) error {
	if attempts < 1 {
		return fmt.Errorf("ledger: transition %s: attempts %d: want the row's (1 or more)", guid, attempts)
	}
	// Its chain lets a re-run after a lost COMMIT answer find that its
	// first run landed (claimTransitionOp).
	return l.transition(ctx, guid, from, l.chain.actor.Instance, attempts, o)
}
