package relay

import (
	"context"

	"lhrelay/internal/ledger"
)

// Ledger is what the relay needs of the idempotency ledger (SPEC §6);
// *ledger.Ledger implements it. Tests may substitute their own.
type Ledger interface {
	// Claim takes the GUID for a validated request, or says why not.
	Claim(ctx context.Context, r ledger.Request) (ledger.Claim, error)
	// Finish records the outcome of an owned request: SENT → to.
	Finish(ctx context.Context, guid string, to ledger.State, rspCode string, response []byte) error
}

var _ Ledger = (*ledger.Ledger)(nil)
