package relay

import (
	"context"
	"sync"

	"lhrelay/internal/ledger"
)

// Ledger is what the relay needs of the idempotency ledger (SPEC §6);
// *ledger.Ledger implements it. Tests may substitute their own.
type Ledger interface {
	// Claim takes the GUID for a validated request, or says why not.
	Claim(ctx context.Context, r ledger.Request) (ledger.Claim, error)
	// Peek answers a request from a read alone, writing nothing
	// (ledger.Peek): for a frame that may not claim (shed, or a claim
	// that could not be written).
	Peek(ctx context.Context, r ledger.Request) (ledger.Claim, error)
	// Finish records the outcome of an owned request, the claim that made
	// attempts: SENT → to, or over a row settled FAILED while the call
	// was under way (a late answer); an error matching
	// ledger.ErrReclaimed means the row was re-claimed since.
	Finish(ctx context.Context, guid string, attempts int, o ledger.Outcome) error
	// FinishLater is Finish without the wait: it queues the outcome
	// (copying response) and calls then with the result once it is
	// committed or has failed. then must be quick. ctx bounds the wait
	// for room in a full queue. If FinishLater returns an error nothing
	// was queued and then is not called.
	FinishLater(ctx context.Context, guid string, attempts int, o ledger.Outcome, then func(error)) error
	// AbandonClaim makes the row of a claim whose commit was not
	// confirmed FAILED, if it exists still SENT with that claim's
	// attempts and token (ledger.UnconfirmedClaimError).
	AbandonClaim(ctx context.Context, guid string, attempts int, token string, o ledger.Outcome) error
}

// recordings counts the outcomes queued with FinishLater whose results
// have not come back, so that a stop can wait for them.
type recordings struct {
	mu   sync.Mutex
	n    int
	none *sync.Cond // on mu; signalled when n drops to 0
}

func newRecordings() *recordings {
	r := &recordings{}
	r.none = sync.NewCond(&r.mu)
	return r
}

func (r *recordings) add() {
	r.mu.Lock()
	r.n++
	r.mu.Unlock()
}

func (r *recordings) done() {
	r.mu.Lock()
	r.n--
	if r.n == 0 {
		r.none.Broadcast()
	}
	r.mu.Unlock()
}

// wait returns once no outcome is waiting to be recorded.
func (r *recordings) wait() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.n > 0 {
		r.none.Wait()
	}
}

var _ Ledger = (*ledger.Ledger)(nil)
