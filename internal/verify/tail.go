package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"

	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
)

// The unknown tail: after the traffic, while the relays still run, a few
// transfers are sent whose calls the core resets unanswered, half of them
// after posting. Each ends UNKNOWN/E901, young enough (the relays settle
// only rows --settle-min-age old) to be UNKNOWN still when the settling
// phase runs reprocess, which must leave them alone: resending one, or
// re-claiming one its lookup found unposted, is a violation the checker
// sees whatever the traffic happened to leave. Without the tail, whether
// reprocess meets an UNKNOWN row at all depends on the machine's timing.
var tailFaults = []coresim.Fault{coresim.FaultResetUnposted, coresim.FaultResetUnposted, coresim.FaultResetPosted, coresim.FaultResetPosted}

// tailTries bounds the GUIDs the tail may use: a transfer the relay
// refuses before calling the core (its breaker open after the traffic's
// faults, or admission shedding it) leaves the armed fault for the next.
const tailTries = 16

// tailPause is the wait after such a refusal: longer than the breaker's
// cooldown, so that the next transfer is the breaker's probe and reaches
// the core. The tail's own resets count toward opening the breaker, so a
// shorter wait can spend every GUID on refusals.
const tailPause = breakerCooldown + 250*time.Millisecond

// drawTail draws the tail's business transactions: one attempt each, on
// relay 0, with no twin, variant or replay.
func drawTail(rng *rand.Rand) []Business {
	bs := make([]Business, tailTries)
	for i := range bs {
		bs[i] = Business{GUID: randomGUID(rng), Amount: int64(100 + i), Memo: "verify tail", MaxAttempts: 1, Relays: []int{0}}
	}
	return bs
}

// unknownTail sends the tail: for each of tailFaults, armed for the next
// transfer, fresh GUIDs of s.Tail until one reaches the core and spends
// the fault. What the relay answers for it (E901, unless a planted
// mistake says otherwise) is the checker's to judge.
func (w *world) unknownTail(ctx context.Context, tx *generated.Transaction, record func(Attempt)) error {
	tail := w.s.Tail
	for _, f := range tailFaults {
		if err := w.control(ctx, "/arm", url.Values{"fault": {string(f)}, "n": {"1"}}); err != nil {
			return err
		}
		for spent := false; !spent; {
			if len(tail) == 0 {
				return fmt.Errorf("unknown tail: %s reached the core with none of %d transfers", f, tailTries)
			}
			b := tail[0]
			tail = tail[1:]
			orig, _, err := frames(tx, b)
			if err != nil {
				return fmt.Errorf("unknown tail: building %s: %w", b.GUID, err)
			}
			a := w.send(ctx, b.Relays[0], orig)
			a.GUID, a.N = b.GUID, 1
			record(a)
			n, err := w.armedTransfers(ctx)
			if err != nil {
				return fmt.Errorf("unknown tail: %w", err)
			}
			if spent = n == 0; !spent && !pause(ctx, tailPause) {
				return ctx.Err()
			}
		}
		w.mu.Lock()
		w.applied["unknown-tail"]++
		w.mu.Unlock()
	}
	return nil
}

// armedTransfers is how many transfers the core's armed faults are still
// for (coresim's GET /armed).
func (w *world) armedTransfers(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.ctlURL+"/armed", nil)
	if err != nil {
		return 0, err
	}
	resp, err := w.httpc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("core control /armed: %w", err)
	}
	defer resp.Body.Close()
	var n coresim.Armed
	if err := json.NewDecoder(resp.Body).Decode(&n); err != nil {
		return 0, fmt.Errorf("core control /armed: %s: %w", resp.Status, err)
	}
	return n.Transfers, nil
}
