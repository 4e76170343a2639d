package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
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

// The flag of every settler (resolve, reprocess, the relay) that sets
// LookupGuard.TrustNotFound.
const (
	TrustNotFoundFlag  = "trust-lookup-404"
	TrustNotFoundUsage = "take every lookup's 404 as never posted, unchecked: only for a core known to answer an unknown transfer exactly as a path it does not serve, with --core known right"
)

// probeSuffix is appended to a lookup's path to make one that no core
// serves, for LookupGuard's comparison.
const probeSuffix = "/lhrelay-no-such-path"

// LookupGuard decides whether a transaction's lookup answering 404 may
// settle a row as never posted (FAILED/E902, which makes it safe to send
// again). A core reached at the wrong path (a typo in --core's path)
// answers 404 to every lookup; trusted, that 404 would turn posted
// transfers into resendable ones, and reprocess or the channel's retry
// would post them twice. So a 404 is distrusted on evidence that the
// lookup's route is not served, and only on that (SPEC §7): both
//
//   - the lookup of a random GUID (one nobody sent) answers exactly as the
//     same path with probeSuffix added, a path no core serves: the same
//     status, the same media type and the same body once each request's
//     path and GUID are masked (corecall.Answer). The suffix keeps the
//     whole path, so a gateway or framework that routes by prefix sends
//     both to the same place; and
//   - no lookup of the transaction has answered 200 from this core: not in
//     this run, nor in this settler's rounds within TTL, nor the lookup of
//     the newest row the ledger holds as posted (DONE/0000), made first.
//
// A core that answers an unknown transfer 404 {"error":"no such transfer"}
// and an unknown path 404 {"error":"no such path"} is trusted on a new
// ledger. A posted row that the core denies (its lookup answers 404) is
// not evidence about the route: it is logged, and the probes decide.
//
// A distrusted 404 leaves the rows as they are and the run ends with
// ErrLookupUnverified, naming the core's URL: the operator checks --core,
// or, for a core that really answers both alike, says TrustNotFound
// (--trust-lookup-404). A check the core gives no usable answer to (no
// answer, a new GUID's lookup other than 404, a server error to the path
// no core serves, which a gateway failing now and then would otherwise
// turn into a difference) leaves the rows too, as an unreachable core
// does. A refusal is not remembered past
// the run (a core fixed meanwhile is asked again next time); a trust is,
// for TTL.
//
// A LookupGuard is safe for concurrent use.
type LookupGuard struct {
	// TTL is how long a transaction's route stays trusted; 0: the run
	// that established it only (each Resolve without a guard of its own
	// makes a fresh one).
	TTL time.Duration
	// TrustNotFound is the operator's word (--trust-lookup-404) that the
	// core's lookups are served even though it answers them as it
	// answers paths it does not serve: every 404 settles, unchecked.
	TrustNotFound bool

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
	return fmt.Sprintf("%s lookups answering 404 are not trusted to mean never posted: %s; check that --core %s is the core's base URL (GET %s%s); if it is and the core answers both alike, --%s trusts its 404s", e.Tx, e.Why, e.Core, e.Core, e.Path, TrustNotFoundFlag)
}

func (e *UnverifiedError) Unwrap() error { return ErrLookupUnverified }

// check returns nil when tx's 404s may settle rows; an *UnverifiedError
// when the core's answers show the lookup's route unserved; an error
// matching ErrCoreUnreachable when the core gave the check no usable
// answer; any other error is the ledger's. body is a request of tx, for
// lookup paths that hold request fields.
func (g *LookupGuard) check(ctx context.Context, l *ledger.Ledger, core *corecall.Client, tx *generated.Transaction, body generated.RequestBody, log *slog.Logger) error {
	if g.TrustNotFound || g.trustedNow(tx.Code) {
		return nil
	}
	posted, ok, err := l.Newest(ctx, ledger.Filter{States: []ledger.State{ledger.StateDone}, RspCode: string(generated.RspHTTP200), TxCode: tx.Code})
	if err != nil {
		return err
	}
	// denied: why the newest posted row did not show the route served.
	var denied string
	if ok {
		if denied = confirmPosted(ctx, core, tx, posted); denied == "" {
			g.trust(tx.Code)
			return nil
		}
	}
	random := channel.NewGUID()
	path, err := body.LookupPath(random)
	if err != nil {
		return fmt.Errorf("the lookup path of %s: %w", tx.Code, err)
	}
	noAnswer := func(format string, args ...any) error {
		return fmt.Errorf("%w to check %s lookups answering 404: %s", ErrCoreUnreachable, tx.Code, fmt.Sprintf(format, args...))
	}
	lookup, err := core.Probe(ctx, path, random)
	if err != nil {
		return noAnswer("the lookup of a new GUID failed: %v", err)
	}
	if lookup.Status != http.StatusNotFound {
		return noAnswer("the core answered HTTP %d to the lookup of a new GUID", lookup.Status)
	}
	wrong, err := core.Probe(ctx, path+probeSuffix, random)
	switch {
	case err != nil:
		return noAnswer("GET %s failed: %v", path+probeSuffix, err)
	case wrong.Status >= http.StatusInternalServerError:
		return noAnswer("the core answered HTTP %d to GET %s", wrong.Status, path+probeSuffix)
	}
	if wrong == lookup {
		why := fmt.Sprintf("the core answers the lookup of a new GUID exactly as it answers a path it does not serve (HTTP %d %q, body %s once the path and GUID are masked), and no lookup of %s has answered 200 from it", wrong.Status, wrong.MediaType, quoteBody(wrong.Body), tx.Code)
		if denied != "" {
			why += " (" + denied + ")"
		}
		return &UnverifiedError{Tx: tx.Code, Core: core.Base(), Path: path, Why: why}
	}
	if denied != "" {
		log.Warn("a row the ledger holds as posted is not confirmed by the core's lookup, whose route is served: its 404s are trusted; if this core is not the one the relay posts to, fix --core",
			"tx", tx.Code, "core", core.Base(), "posted", posted.GUID, "why", denied)
	}
	g.trust(tx.Code)
	return nil
}

// confirmPosted looks up posted, a row the ledger holds as posted, and
// returns "" when the core answers 200 (tx's lookup route is served), else
// why not.
func confirmPosted(ctx context.Context, core *corecall.Client, tx *generated.Transaction, posted ledger.Row) string {
	r, err := wire.ParseRequest(posted.Request)
	if err != nil {
		return fmt.Sprintf("the stored request of %s, which the ledger holds as posted, does not decode: %v", posted.GUID, err)
	}
	found, err := core.Lookup(ctx, tx, posted.GUID, r.Body)
	switch {
	case err != nil:
		return fmt.Sprintf("the lookup of %s, which the ledger holds as posted, failed: %v", posted.GUID, err)
	case !found.Posted:
		return fmt.Sprintf("the core answered 404 to the lookup of %s, which the ledger holds as posted (DONE/%s)", posted.GUID, generated.RspHTTP200)
	}
	return ""
}

// maxQuotedBody bounds how much of a body a refusal quotes.
const maxQuotedBody = 200

// quoteBody is body quoted for a message, cut at maxQuotedBody bytes.
func quoteBody(body string) string {
	if len(body) > maxQuotedBody {
		return strconv.Quote(body[:maxQuotedBody]) + "…"
	}
	return strconv.Quote(body)
}

// isUnverified reports whether err is the guard's refusal (rather than the
// core's silence or the ledger's failure).
func isUnverified(err error) bool { return errors.Is(err, ErrLookupUnverified) }
