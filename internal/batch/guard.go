package batch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"lhrelay/internal/channel"
	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/wire"
)

// ErrLookupUnverified is returned, after the summary, by a run that left
// rows unchanged because a lookup's 404 could not be trusted to mean
// "never posted". It matches ErrCoreUnreachable: the rows wait, the run
// exits 1.
var ErrLookupUnverified = fmt.Errorf("%w: a lookup's 404 could not be trusted", ErrCoreUnreachable)

// OutcomeUnverified counts the rows whose lookup answered 404 while the
// guard could not trust it; they are unchanged. It is not among
// ResolveOutcomes: the summary line shows it only when it happened.
const OutcomeUnverified = "unverified"

// probeSuffix is appended to a lookup's path to make one that no core
// serves, for LookupGuard's comparison.
const probeSuffix = "/lhrelay-no-such-path"

// LookupGuard decides whether a transaction's lookup answering 404 may
// settle a row as never posted (FAILED/E902, which makes it safe to send
// again). A core reached at the wrong path (a typo in --core's path)
// answers 404 to every lookup; trusted, that 404 would turn posted
// transfers into resendable ones, and reprocess or the channel's retry
// would post them twice. So a 404 settles a row only once the lookup's
// route is shown to be served, for that transaction, by one of:
//
//  1. A lookup of the transaction answered 200 (in this run, or in this
//     settler's rounds within TTL): the route exists.
//  2. The ledger holds a row of the transaction as posted (DONE/0000): the
//     newest is looked up. 200 trusts the route. 404 refutes it: the core
//     denies a transfer it posted, so its 404s mean nothing here.
//  3. The ledger holds none (a new ledger, or one purged of them): a
//     random GUID is looked up, and the same path with probeSuffix added.
//     The first must answer 404, and the second differently (another
//     status or another media type): a core answering both alike answers
//     a path it does not serve as it answers the lookup, so the 404 is
//     not the lookup's. The suffix keeps the whole path, so a gateway or
//     framework that routes by prefix sends both to the same place.
//
// Otherwise the rows stay as they are and the run ends with
// ErrLookupUnverified, naming the core's URL: the operator checks --core.
// A refusal is not remembered past the run (a core that was down for the
// check is asked again next time); a trust is, for TTL.
//
// A LookupGuard is safe for concurrent use.
type LookupGuard struct {
	// TTL is how long a transaction's route stays trusted; 0: the run
	// that established it only (each Resolve without a guard of its own
	// makes a fresh one).
	TTL time.Duration

	mu      sync.Mutex
	trusted map[string]time.Time // TX_CODE → until when
}

// trustedNow reports whether tx's route is trusted.
func (g *LookupGuard) trustedNow(tx string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	until, ok := g.trusted[tx]
	return ok && (g.TTL == 0 || time.Now().Before(until))
}

// trust records that tx's route was shown to be served.
func (g *LookupGuard) trust(tx string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.trusted == nil {
		g.trusted = map[string]time.Time{}
	}
	g.trusted[tx] = time.Now().Add(g.TTL)
}

// UnverifiedError says why a transaction's 404s are not trusted.
type UnverifiedError struct {
	Tx   string
	Core string // the base URL (--core)
	Path string // the lookup path checked
	Why  string
}

func (e *UnverifiedError) Error() string {
	return fmt.Sprintf("%s lookups answering 404 are not trusted to mean never posted: %s; check that --core %s is the core's base URL (GET %s%s)", e.Tx, e.Why, e.Core, e.Core, e.Path)
}

func (e *UnverifiedError) Unwrap() error { return ErrLookupUnverified }

// check returns nil when tx's 404s may settle rows, or an error
// (an *UnverifiedError when the core's answers refute or cannot show the
// route). body is a request of tx, for lookup paths that hold request
// fields.
func (g *LookupGuard) check(ctx context.Context, l *ledger.Ledger, core *corecall.Client, tx *generated.Transaction, body generated.RequestBody) error {
	if g.trustedNow(tx.Code) {
		return nil
	}
	unverified := func(path, format string, args ...any) error {
		return &UnverifiedError{Tx: tx.Code, Core: core.Base(), Path: path, Why: fmt.Sprintf(format, args...)}
	}
	posted, ok, err := l.Newest(ctx, ledger.Filter{States: []ledger.State{ledger.StateDone}, RspCode: string(generated.RspHTTP200), TxCode: tx.Code})
	if err != nil {
		return err
	}
	if ok {
		r, err := wire.ParseRequest(posted.Request)
		if err != nil {
			return unverified("", "the stored request of %s, which the ledger holds as posted, does not decode: %v", posted.GUID, err)
		}
		path, _ := r.Body.LookupPath(posted.GUID)
		found, err := core.Lookup(ctx, tx, posted.GUID, r.Body)
		switch {
		case err != nil:
			return unverified(path, "the lookup of %s, which the ledger holds as posted, failed: %v", posted.GUID, err)
		case !found.Posted:
			return unverified(path, "the core answered 404 to the lookup of %s, which the ledger holds as posted (DONE/%s)", posted.GUID, generated.RspHTTP200)
		}
		g.trust(tx.Code)
		return nil
	}
	random := channel.NewGUID()
	path, err := body.LookupPath(random)
	if err != nil {
		return fmt.Errorf("the lookup path of %s: %w", tx.Code, err)
	}
	lookup, err := core.Probe(ctx, path, random)
	if err != nil {
		return unverified(path, "the ledger holds no posted %s to check the lookup with, and the lookup of a new GUID failed: %v", tx.Code, err)
	}
	if lookup.Status != http.StatusNotFound {
		return unverified(path, "the ledger holds no posted %s to check the lookup with, and the core answered HTTP %d to the lookup of a new GUID", tx.Code, lookup.Status)
	}
	wrong, err := core.Probe(ctx, path+probeSuffix, random)
	if err != nil {
		return unverified(path, "the ledger holds no posted %s to check the lookup with, and GET %s failed: %v", tx.Code, path+probeSuffix, err)
	}
	if wrong == lookup {
		return unverified(path, "the ledger holds no posted %s to check the lookup with, and the core answers the lookup of a new GUID as it answers a path it does not serve (HTTP %d %q)", tx.Code, wrong.Status, wrong.MediaType)
	}
	g.trust(tx.Code)
	return nil
}

// isUnverified reports whether err is the guard's refusal (rather than the
// ledger's failure).
func isUnverified(err error) bool { return errors.Is(err, ErrLookupUnverified) }
