package verify

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"time"

	"lhrelay/internal/coresim"
)

// faultKind is one kind of fault a schedule may draw. Adding a kind is one
// entry in faultKinds.
type faultKind struct {
	name     string
	weight   int
	postgres bool // only on a PostgreSQL ledger
	// standalone: only on a single server (its restart, and the fault
	// proxy in front of it), not on a failover schedule's pair.
	standalone bool
	// resends: it sends FAILED rows again, which must wait for quiesce in
	// an early-settle schedule (a call settled FAILED too early may still
	// be posted and answered).
	resends bool
	// delay draws the event's duration (zero: none).
	delay func(*rand.Rand, params) time.Duration
	apply func(context.Context, *world, Event) error
}

func noDelay(*rand.Rand, params) time.Duration { return 0 }

// arm arms a core fault for the event's N next requests.
func arm(f coresim.Fault) func(context.Context, *world, Event) error {
	return func(ctx context.Context, w *world, e Event) error {
		return w.control(ctx, "/arm", url.Values{"fault": {string(f)}, "n": {fmt.Sprint(e.N)}, "delay": {e.Delay.String()}})
	}
}

var faultKinds = []faultKind{
	{name: "relay-kill", weight: 2, delay: noDelay, apply: func(ctx context.Context, w *world, e Event) error {
		// Also while a call settled early is under way, or its late
		// answer's write is: the row stays FAILED though posted, and
		// reprocess, which looks a row up before resending it, must
		// settle it instead of posting it again.
		w.mu.Lock()
		w.kills = append(w.kills, kill{relay: e.Relay, at: time.Now()})
		w.mu.Unlock()
		return w.relays[e.Relay].restart(ctx, true)
	}},
	{name: "relay-term", weight: 1, delay: noDelay, apply: func(ctx context.Context, w *world, e Event) error {
		return w.relays[e.Relay].restart(ctx, false)
	}},
	{name: "core-latency", weight: 5, apply: arm(coresim.FaultDelay), delay: func(r *rand.Rand, p params) time.Duration {
		return time.Duration(r.Int64N(int64(p.timeout * 8 / 10)))
	}},
	{name: "core-slow-then-post", weight: 6, apply: arm(coresim.FaultDelay), delay: func(r *rand.Rand, p params) time.Duration {
		return p.timeout + time.Duration(r.Int64N(int64(p.maxDelay-p.timeout)))
	}},
	{name: "core-500", weight: 2, delay: noDelay, apply: arm(coresim.Fault500)},
	{name: "core-504", weight: 2, delay: noDelay, apply: arm(coresim.Fault504Posted)},
	{name: "core-reset-after-read-posted", weight: 2, delay: noDelay, apply: arm(coresim.FaultResetPosted)},
	{name: "core-reset-after-read-unposted", weight: 2, delay: noDelay, apply: arm(coresim.FaultResetUnposted)},
	{name: "core-garbled-200", weight: 2, delay: noDelay, apply: arm(coresim.FaultGarbledPosted)},
	{name: "core-200-other-guid", weight: 2, delay: noDelay, apply: arm(coresim.FaultOtherGUIDPosted)},
	{name: "core-accept-then-hang", weight: 2, delay: noDelay, apply: arm(coresim.FaultHang)},
	{name: "core-lookup-other-guid", weight: 2, delay: noDelay, apply: arm(coresim.FaultLookupOtherGUID)},
	{name: "core-refuse", weight: 2, apply: func(ctx context.Context, w *world, e Event) error {
		return w.control(ctx, "/refuse", url.Values{"for": {e.Delay.String()}})
	}, delay: func(r *rand.Rand, _ params) time.Duration {
		return time.Duration(100+r.IntN(400)) * time.Millisecond
	}},
	{name: "core-overload", weight: 2, apply: func(ctx context.Context, w *world, e Event) error {
		// With coresim --max-concurrent, a service time per request puts
		// the core at its capacity for a while.
		each := time.Duration(e.N) * 25 * time.Millisecond
		return w.control(ctx, "/service", url.Values{"each": {each.String()}, "for": {e.Delay.String()}})
	}, delay: func(r *rand.Rand, _ params) time.Duration {
		return time.Duration(300+r.IntN(700)) * time.Millisecond
	}},
	{name: "resolve", weight: 2, delay: noDelay, apply: func(ctx context.Context, w *world, _ Event) error {
		return w.batch(ctx, false, "resolve", "--min-age", minAge, "--stale-sent", staleSent)
	}},
	{name: "reprocess", weight: 3, resends: true, delay: noDelay, apply: func(ctx context.Context, w *world, _ Event) error {
		return w.batch(ctx, false, "reprocess", "--max-attempts", "4")
	}},
	{name: "purge", weight: 1, delay: noDelay, apply: func(ctx context.Context, w *world, _ Event) error {
		return w.batch(ctx, false, "purge", "--days", "1")
	}},
	{name: "postgres-lost-commit", weight: 2, postgres: true, standalone: true, delay: noDelay, apply: func(_ context.Context, w *world, e Event) error {
		// The next COMMITs reach the server, and their answers are lost.
		w.proxy.CutAfterCommits(e.N)
		return nil
	}},
	{name: "postgres-cut", weight: 1, postgres: true, standalone: true, delay: noDelay, apply: func(_ context.Context, w *world, _ Event) error {
		w.proxy.CutAll() // every connection to the database at once
		return nil
	}},
	{name: "postgres-restart", weight: 1, postgres: true, standalone: true, delay: noDelay, apply: func(_ context.Context, w *world, _ Event) error {
		return w.pg.Restart()
	}},
	// Never drawn by weight: a failover schedule (Schedule.Failover) has
	// exactly one, the primary killed and the synchronous standby
	// promoted; the relays follow through their multi-host URL.
	{name: failoverKind, weight: 0, postgres: true, delay: noDelay, apply: func(_ context.Context, w *world, _ Event) error {
		return w.pair.KillPrimaryAndPromote()
	}},
}

const failoverKind = "postgres-failover"

// faultsFor lists the kinds a schedule on store may draw; on a failover
// schedule's pair, none that needs a single server.
func faultsFor(store string, failover bool) []faultKind {
	var ks []faultKind
	for _, k := range faultKinds {
		if (!k.postgres || store == StorePostgres) && !(failover && k.standalone) && k.weight > 0 {
			ks = append(ks, k)
		}
	}
	return ks
}
