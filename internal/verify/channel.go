package verify

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"lhrelay/internal/channel"
	"lhrelay/internal/generated"
)

// Attempt is one frame a channel sent, and what came back.
type Attempt struct {
	GUID     string    `json:"guid"`
	N        int       `json:"n"` // attempt number of the business transaction, from 1
	Twin     bool      `json:"twin,omitempty"`
	Relay    int       `json:"relay"`
	Variant  bool      `json:"variant,omitempty"` // sent with the other body
	Sent     time.Time `json:"sent"`
	Answered time.Time `json:"answered"`
	Code     string    `json:"code,omitempty"` // "" when no answer came
	Err      string    `json:"err,omitempty"`
	Request  []byte    `json:"request"`
	Answer   []byte    `json:"answer,omitempty"`
}

// postingTx is the transaction the channels send: the registry's first
// one that posts (its layout declares a lookup) with a JSON body.
func postingTx() (*generated.Transaction, error) {
	for _, tx := range generated.Transactions() {
		if tx.Settle == generated.SettleByLookup && tx.JSONBody {
			return tx, nil
		}
	}
	return nil, errors.New("no registered transaction posts with a lookup")
}

// Codes the channel reads; taken from the generated table.
var (
	codeOK       = string(generated.SourceHTTP200.Code())
	codeUnknown  = string(generated.SourceReadTimeout.Code())
	codeNotSent  = string(generated.SourceConnectFail.Code())
	codeBusy     = string(generated.SourceInProgress.Code())
	codeReused   = string(generated.SourceGUIDReused.Code())
	codeCoreFail = string(generated.SourceHTTP500.Code())
)

// final reports whether an answer ends a business transaction: the core's
// own verdict.
func final(code string) bool {
	src, ok := generated.RspCode(code).Source()
	return ok && src.LedgerState() == "DONE"
}

// frames builds the request frame of b and of its variant.
func frames(tx *generated.Transaction, b Business) (orig, variant []byte, err error) {
	build := func(amount int64) ([]byte, error) {
		f := channel.WithDefaults(tx, map[string]string{"amount": strconv.FormatInt(amount, 10), "memo": b.Memo})
		return channel.BuildRequest(tx.Code, b.GUID, f, time.Now())
	}
	if orig, err = build(b.Amount); err != nil {
		return nil, nil, err
	}
	variant, err = build(b.Amount + 1)
	return orig, variant, err
}

// business plays one business transaction, recording every attempt.
func (w *world) business(ctx context.Context, tx *generated.Transaction, b Business, record func(Attempt)) {
	orig, variant, err := frames(tx, b)
	if err != nil {
		w.runErr("building %s: %v", b.GUID, err)
		return
	}
	for n := 1; n <= b.MaxAttempts; n++ {
		if ctx.Err() != nil {
			return
		}
		frame, isVariant := orig, n == b.VariantAt
		if isVariant {
			frame = variant
		}
		codes := []string{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		send := func(relay int, twin bool) {
			defer wg.Done()
			a := w.send(ctx, relay, frame)
			a.GUID, a.N, a.Twin, a.Variant = b.GUID, n, twin, isVariant
			record(a)
			mu.Lock()
			codes = append(codes, a.Code)
			mu.Unlock()
		}
		if b.EarlySettle && !w.settledEarly(b.GUID) {
			answered := make(chan struct{})
			wg.Add(2)
			go func() {
				defer wg.Done()
				w.settleEarly(ctx, b.GUID, answered)
			}()
			go func() {
				defer close(answered)
				send(b.Relays[n-1], false)
			}()
		} else {
			wg.Add(1)
			go send(b.Relays[n-1], false)
		}
		if n == 1 && b.Twice {
			wg.Add(1)
			go send(b.Relays[len(b.Relays)-1], true)
		}
		wg.Wait()
		if b.EarlySettle && (len(codes) != 1 || codes[0] != codeNotSent) {
			// Sent again only after E902, which sent nothing: another
			// send while a call settled early may still post would be a
			// second posting.
			return
		}
		if isVariant {
			continue
		}
		for _, c := range codes {
			if final(c) {
				if b.Replay {
					a := w.send(ctx, b.Relays[n], orig)
					a.GUID, a.N = b.GUID, n+1
					record(a)
				}
				return
			}
			if c == codeReused {
				return
			}
		}
		if !pause(ctx, b.Backoff) {
			return
		}
	}
}

// pause waits d, as a channel waits before it sends again; false when ctx
// ended first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// send is one attempt on one connection.
func (w *world) send(ctx context.Context, relay int, frame []byte) Attempt {
	a := Attempt{Relay: relay, Request: frame, Sent: time.Now()}
	c, err := channel.Dial(ctx, w.relays[relay].address(), w.cfg.params().timeout+3*time.Second)
	if err != nil {
		a.Err, a.Answered = err.Error(), time.Now()
		return a
	}
	defer c.Close()
	ans, err := c.Send(frame)
	a.Answered = time.Now()
	if err != nil {
		a.Err = err.Error()
		return a
	}
	a.Answer = ans
	d, err := channel.Decode(ans)
	if err != nil {
		a.Err = fmt.Sprintf("undecodable answer: %v", err)
		return a
	}
	a.Code = string(d.Code)
	return a
}

// settleEarly is the early-settle fault: once the core holds the GUID's
// call, resolve settles the GUID alone with no age (--min-age 0,
// --stale-sent 0.001), as an operator with too short a window would; its
// lookup gets 404 and the row becomes FAILED/E902 while the call is still
// under way. It returns once that is done (or the call was answered
// first); the late answer is the relay's to record, and a relay killed
// before it does leaves the row FAILED for reprocess to settle by its
// lookup.
func (w *world) settleEarly(ctx context.Context, guid string, answered <-chan struct{}) {
	if !w.waitAtCore(ctx, guid, w.cfg.params().slow, answered) || closed(answered) {
		// (A relay that already answered has given up on the call, or
		// the call never reached the core: too late, or nothing, for
		// what this fault is for, see missedWindow.)
		return
	}
	if w.s.Store == StoreSQLite {
		// SQLite's updated_at holds whole seconds and an age is rounded
		// up: no age, however short, is proven for a row of the current
		// second, and a resolve run within the claim's second selects
		// nothing. The claim came before the call reached the core, so
		// its second is over at the next whole second from now.
		next := time.Now().Truncate(time.Second).Add(time.Second + 10*time.Millisecond)
		t := time.NewTimer(time.Until(next))
		select {
		case <-t.C:
		case <-answered:
		case <-ctx.Done():
		}
		t.Stop()
		if closed(answered) || ctx.Err() != nil {
			return
		}
	}
	// A lookup that a fault spoilt (the core refusing, or answering about
	// another GUID) leaves the row unchanged and resolve exits 1: it is
	// run again while the core still holds the call, as an operator
	// would, since only a row settled before the core posts is what this
	// fault is for.
	for {
		from := time.Now()
		code, err := w.batchExit(ctx, false, "resolve", "--guid", guid, "--min-age", "0", "--stale-sent", "0.001")
		fmt.Fprintf(w.logf, "verify: early settle of %s: resolve exited %d after %v (answered: %v)\n", guid, code, time.Since(from).Round(time.Millisecond), closed(answered))
		if err != nil {
			w.runErr("early settle of %s: %v", guid, err)
			break
		}
		if code != 1 || closed(answered) || !w.atCore(ctx, guid) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the fault's window: no event to wait on
	}
	w.mu.Lock()
	if w.earlyGUIDs == nil {
		w.earlyGUIDs = map[string]bool{}
	}
	w.earlyGUIDs[guid] = true
	w.applied["early-settle"]++
	w.mu.Unlock()
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (w *world) settledEarly(guid string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.earlyGUIDs[guid]
}

// waitAtCore waits (at most within, and no longer than until stop is
// closed) until the core handles a POST of guid.
func (w *world) waitAtCore(ctx context.Context, guid string, within time.Duration, stop <-chan struct{}) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) && ctx.Err() == nil && !closed(stop) {
		if w.atCore(ctx, guid) {
			return true
		}
		time.Sleep(5 * time.Millisecond) // polling a count: no event to wait on
	}
	return false
}

// atCore reports whether the core is handling a POST of guid now.
func (w *world) atCore(ctx context.Context, guid string) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, w.ctlURL+"/inflight?guid="+guid, nil)
	resp, err := w.httpc.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var n int
	_, _ = fmt.Fscan(resp.Body, &n)
	return n > 0
}
