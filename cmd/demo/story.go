package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"lhrelay/internal/batch"
	"lhrelay/internal/channel"
	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

// The accounts the story uses: the simulator's built-in ones
// (coresim.DefaultAccounts, SPEC §8), each picked by what the story needs
// of it, and two of the demo's own.
var (
	// simRich can pay every transfer of the story.
	simRich = simAccount("funded within the transfer limit", func(a coresim.Account) bool { return a.Balance > 0 && a.Balance <= coresim.DefaultLimit })
	// simEmpty has nothing to pay with.
	simEmpty = simAccount("empty", func(a coresim.Account) bool { return a.Balance == 0 })
	// simWealthy holds more than the transfer limit, so a transfer over
	// it is refused for the limit alone.
	simWealthy = simAccount("funded over the transfer limit", func(a coresim.Account) bool { return a.Balance > coresim.DefaultLimit })

	acctRich, acctEmpty, acctWealthy = simRich.Acct, simEmpty.Acct, simWealthy.Acct
	// acctMissing is an account number of our bank the simulator does
	// not hold.
	acctMissing = missingAccount(simRich)
	// acctOther is the deposit account, at another bank: the simulator
	// credits only its own accounts, so this one is never touched.
	acctOther = "22003004005006"
)

// guidPrefix starts every GUID of the demo, so they are easy to spot.
const guidPrefix = "dec0de"

// txUnregistered is a TX_CODE no layout defines.
var txUnregistered = channel.UnregisteredTxCode()

// overLimit is over the simulator's per-transfer limit.
const overLimit = 2 * coresim.DefaultLimit

// The banks: ours is the one holding the simulator's accounts; the other
// is the first bank of the BANK code map that is not ours. Both as wire
// codes (the frames) and as the core's ids (the report).
var (
	bankOursCore  = simRich.Bank
	bankOurs      = wireBank(bankOursCore)
	bankOther     = otherBank(bankOurs)
	bankOtherCore = coreBank(bankOther)
)

// The transactions the story sends, from the generated layouts' own types
// (their fields are set by name, so a layout that changes them breaks the
// build here, not the story): a transfer (one that posts, settled by a
// lookup) and a balance inquiry (a read).
var (
	txTransfer = new(generated.BKTR0001Request).TxCode()
	txInquiry  = new(generated.BKIQ0001Request).TxCode()
	// transferTx is the transfer's registration: its core call and lookup,
	// which the report names.
	transferTx, _ = generated.LookupTransaction(txTransfer)
)

// lookupShown is the transfer's lookup as the report shows it: the method
// and the path up to its last segment, the GUID's, elided.
func lookupShown() string {
	p := transferTx.LookupPath
	return http.MethodGet + " " + p[:strings.LastIndex(p, "/")+1] + "…"
}

// simAccount is the first built-in account of the simulator that fits.
func simAccount(what string, fits func(coresim.Account) bool) coresim.Account {
	for _, a := range coresim.DefaultAccounts() {
		if fits(a) {
			return a
		}
	}
	panic("coresim.DefaultAccounts has no account " + what)
}

// missingAccount is an account number at a's bank that the simulator does
// not hold: a's with its last four digits 9999.
func missingAccount(a coresim.Account) string {
	acct := a.Acct[:len(a.Acct)-4] + "9999"
	for _, b := range coresim.DefaultAccounts() {
		if b.Bank == a.Bank && b.Acct == acct {
			panic("coresim.DefaultAccounts holds " + acct)
		}
	}
	return acct
}

// wireBank is the wire code the BANK code map gives the core's bank id.
func wireBank(core string) string {
	code, ok := generated.BankFromCore(core)
	if !ok {
		panic("layouts/BANK.codemap has no bank " + core)
	}
	return code
}

// coreBank is the core's id of a BANK wire code.
func coreBank(wire string) string {
	core, ok := generated.BankToCore(wire)
	if !ok {
		panic("layouts/BANK.codemap has no code " + wire)
	}
	return core
}

// otherBank is the first BANK wire code that is not ours.
func otherBank(ours string) string {
	for _, c := range generated.BankCodes() {
		if c != ours {
			return c
		}
	}
	panic("layouts/BANK.codemap has no bank but ours")
}

// byKey is a request body's values keyed by the layout's JSON keys, the
// form channel.BuildRequest takes.
func byKey(body generated.RequestBody) map[string]string {
	m := map[string]string{}
	for _, f := range body.Fields() {
		m[f.JSON] = f.Value
	}
	return m
}

// step is one row of the report.
type step struct {
	N    int    `json:"n"`
	Name string `json:"step"`
	// Sent describes the frame (or the batch run) in a few words.
	Sent string `json:"sent"`
	GUID string `json:"guid"`
	// Want and Got are response codes; for a batch step, the code the
	// ledger row holds afterwards.
	Want generated.RspCode `json:"want"`
	Got  generated.RspCode `json:"got"`
	// Note is what the answer carried or what the batch run reported.
	Note string `json:"note,omitempty"`
	// Batch marks a step that ran a batch command instead of sending a
	// frame.
	Batch bool `json:"batch,omitempty"`
	// CorePosts is how many POST /v1/transfers for this GUID had reached
	// the core when the step ended.
	CorePosts int          `json:"core_posts"`
	State     ledger.State `json:"ledger_state"` // "" when the ledger has no row
	Attempts  int          `json:"ledger_attempts"`
	Problems  []string     `json:"problems,omitempty"`
}

func (s step) ok() bool { return len(s.Problems) == 0 }

// expect is what a step must end with.
type expect struct {
	code     generated.RspCode
	state    ledger.State // "" means no ledger row
	attempts int
	posts    int
}

// story walks through every response code. Steps that do not go as
// expected are recorded as such and the story goes on; an error means the
// demo itself could not run.
func (w *world) story(ctx context.Context) error {
	rent := transfer{wd: acctRich, dp: acctOther, amount: 50_000, memo: "rent"}

	// 1. A transfer the core posts.
	g1 := demoGUID(1)
	first, err := w.sendTransfer(ctx, "transfer", g1, rent, expect{generated.RspHTTP200, ledger.StateDone, 1, 1})
	if err != nil {
		return err
	}

	// 2-5. The core refuses: business rejections, then a core error. Each
	// is settled (DONE): the same GUID would get the same answer again.
	for i, c := range []struct {
		name string
		t    transfer
		want generated.RspCode
	}{
		{"insufficient funds", transfer{wd: acctEmpty, dp: acctOther, amount: 10_000, memo: "balance 0"}, generated.RspInsufficientFunds},
		{"unknown account", transfer{wd: acctMissing, dp: acctOther, amount: 10_000, memo: "no such account"}, generated.RspNoAccount},
		{"over the limit", transfer{wd: acctWealthy, dp: acctOther, amount: overLimit, memo: "limit " + commas(coresim.DefaultLimit)}, generated.RspLimitExceeded},
		{"core error", transfer{wd: acctRich, dp: acctOther, amount: 10_000, memo: coresim.MemoFail + " on purpose"}, generated.RspHTTP500},
	} {
		if _, err := w.sendTransfer(ctx, c.name, demoGUID(2+i), c.t, expect{c.want, ledger.StateDone, 1, 1}); err != nil {
			return err
		}
	}

	// 6. A malformed frame: a letter O where AMOUNT needs a digit.
	g6 := demoGUID(6)
	bad, err := badAmountFrame(g6, rent)
	if err != nil {
		return err
	}
	if _, err := w.sendRaw(ctx, "malformed frame", g6, txTransfer+" AMOUNT 5000O (a letter O)", bad, expect{code: generated.RspBadFrame}); err != nil {
		return err
	}

	// 7. A TX_CODE no layout defines.
	g7 := demoGUID(7)
	unknown, err := unregisteredFrame(g7, rent)
	if err != nil {
		return err
	}
	if _, err := w.sendRaw(ctx, "unknown transaction", g7, txUnregistered+" (not registered)", unknown, expect{code: generated.RspUnknownTx}); err != nil {
		return err
	}

	// 8. A balance inquiry: a GET to the core, no POST.
	g8 := demoGUID(8)
	inquiry, err := channel.BuildRequest(txInquiry, g8, byKey(&generated.BKIQ0001Request{Bank: bankOurs, Acct: acctRich}), time.Now())
	if err != nil {
		return err
	}
	if _, err := w.sendRaw(ctx, "balance inquiry", g8, fmt.Sprintf("%s %s %s", txInquiry, bankOurs, acctRich), inquiry, expect{generated.RspHTTP200, ledger.StateDone, 1, 0}); err != nil {
		return err
	}

	// 9. The first transfer sent again (a channel that did not get its
	// answer): the stored answer, byte for byte; the core is not called.
	if err := w.replay(ctx, "retry of step 1", g1, rent, first, "stored answer, core not called", expect{generated.RspHTTP200, ledger.StateDone, 1, 1}); err != nil {
		return err
	}

	// 10. The same GUID with another amount: refused, nothing changes.
	reused := rent
	reused.amount = 60_000
	if _, err := w.sendTransfer(ctx, "step 1's GUID, new amount", g1, reused, expect{generated.RspGUIDReused, ledger.StateDone, 1, 1}); err != nil {
		return err
	}

	if err := w.slowStory(ctx); err != nil {
		return err
	}
	return w.downStory(ctx)
}

// slowStory: a transfer the core takes longer to post than the relay
// waits. A duplicate sent while it is in flight gets E903; the original gets
// E901 (result unknown); the core posts it anyway; resolve asks the core and
// settles the row; the retry gets the posted answer.
func (w *world) slowStory(ctx context.Context) error {
	g := demoGUID(11)
	slow := transfer{wd: acctRich, dp: acctOther, amount: 70_000, memo: coresim.MemoSlow + " core"}
	frame, err := transferFrame(g, slow)
	if err != nil {
		return err
	}
	arrived := w.arrivals.expect(g)
	type result struct {
		raw []byte
		a   channel.Answer
		err error
	}
	answered := make(chan result, 1)
	go func() {
		raw, a, err := sendOnce(ctx, w.relayAddr, frame)
		answered <- result{raw, a, err}
	}()
	select {
	case <-arrived:
	case r := <-answered:
		return fmt.Errorf("the slow transfer was answered before it reached the core: %s %v", r.a.Code, r.err)
	case <-time.After(waitLimit):
		return errors.New("the slow transfer never reached the core")
	}

	// In flight: the row is SENT and the core holds the request.
	if _, err := w.sendRaw(ctx, "same GUID while in flight", g, slow.String(), frame, expect{generated.RspInProgress, ledger.StateSent, 1, 1}); err != nil {
		return err
	}

	var r result
	select {
	case r = <-answered:
	case <-time.After(waitLimit):
		return errors.New("the slow transfer was never answered")
	}
	if r.err != nil {
		return fmt.Errorf("slow transfer: %w", r.err)
	}
	w.record(step{Name: "slow transfer", Sent: slow.String(), GUID: g, Got: r.a.Code}, r.a,
		expect{generated.RspReadTimeout, ledger.StateUnknown, 1, 1})

	wctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	if err := w.sim.WaitPosted(wctx, g); err != nil {
		return fmt.Errorf("the core never posted the slow transfer: %w", err)
	}
	var sum *batch.Summary
	err = w.asBatch("resolve", func(l *ledger.Ledger) (err error) {
		sum, err = batch.Resolve(ctx, l, w.core, batch.ResolveConfig{Now: time.Now()})
		return err
	})
	if err != nil {
		return fmt.Errorf("resolve: %w", err)
	}
	w.batchStep("core posted it: resolve", "batch.Resolve ("+lookupShown()+")", g, sum,
		expect{generated.RspHTTP200, ledger.StateDone, 1, 1})

	return w.replay(ctx, "retry after resolve", g, slow, nil, "answer built by resolve, core not called", expect{generated.RspHTTP200, ledger.StateDone, 1, 1})
}

// downStory: a transfer to a relay whose core cannot be reached gets E902
// (definitely not sent); reprocess sends it to the real core; the retry on
// the main relay gets the posted answer.
func (w *world) downStory(ctx context.Context) error {
	g := demoGUID(15)
	t := transfer{wd: acctRich, dp: acctOther, amount: 30_000, memo: "core down"}
	frame, err := transferFrame(g, t)
	if err != nil {
		return err
	}
	_, a, err := sendOnce(ctx, w.downAddr, frame)
	if err != nil {
		return fmt.Errorf("core unreachable: %w", err)
	}
	w.record(step{Name: "core down (second relay)", Sent: t.String(), GUID: g, Got: a.Code}, a,
		expect{generated.RspConnectFail, ledger.StateFailed, 1, 0})

	var sum *batch.Summary
	err = w.asBatch("reprocess", func(l *ledger.Ledger) (err error) {
		sum, err = batch.Reprocess(ctx, l, w.core, batch.ReprocessConfig{MaxAttempts: 3, Now: time.Now()})
		return err
	})
	if err != nil {
		return fmt.Errorf("reprocess: %w", err)
	}
	w.batchStep("reprocess", "batch.Reprocess (max attempts 3)", g, sum,
		expect{generated.RspHTTP200, ledger.StateDone, 2, 1})

	return w.replay(ctx, "retry after reprocess", g, t, nil, "stored answer, core not called", expect{generated.RspHTTP200, ledger.StateDone, 2, 1})
}

// transfer is a transfer from our bank to the other one.
type transfer struct {
	wd, dp string
	amount int64
	memo   string
}

func (t transfer) fields() map[string]string {
	return byKey(&generated.BKTR0001Request{WdBank: bankOurs, WdAcct: t.wd, DpBank: bankOther, DpAcct: t.dp, Amount: t.amount, Memo: t.memo})
}

// String describes the transfer for the table. The deposit account is the
// same in every step and named in the report's heading.
func (t transfer) String() string {
	return fmt.Sprintf("%s %s %s %q", txTransfer, t.wd, commas(t.amount), t.memo)
}

func transferFrame(guid string, t transfer) ([]byte, error) {
	return channel.BuildRequest(txTransfer, guid, t.fields(), time.Now())
}

// badAmountFrame is t's frame with a letter O in place of the last digit of
// AMOUNT. The digit is found, not spelt: two frames that differ only by an
// amount of one more differ in that byte alone.
func badAmountFrame(guid string, t transfer) ([]byte, error) {
	now := time.Now()
	a, err := channel.BuildRequest(txTransfer, guid, t.fields(), now)
	if err != nil {
		return nil, err
	}
	t.amount++
	b, err := channel.BuildRequest(txTransfer, guid, t.fields(), now)
	if err != nil {
		return nil, err
	}
	for i := range a {
		if a[i] != b[i] {
			a[i] = 'O'
			return a, nil
		}
	}
	return nil, errors.New("no AMOUNT byte found")
}

// unregisteredFrame is a well-formed frame whose TX_CODE no layout
// defines: t's frame with another code in its header. (AppendFrame itself
// refuses to put a transfer's body in such a frame.)
func unregisteredFrame(guid string, t transfer) ([]byte, error) {
	frame, err := transferFrame(guid, t)
	if err != nil {
		return nil, err
	}
	var h generated.Header
	if err := h.Decode(string(frame[:generated.HeaderLen])); err != nil {
		return nil, err
	}
	h.TxCode = txUnregistered
	out, err := h.AppendTo(nil)
	if err != nil {
		return nil, err
	}
	return append(out, frame[generated.HeaderLen:]...), nil
}

// sendTransfer sends t on the persistent connection and records the step.
func (w *world) sendTransfer(ctx context.Context, name, guid string, t transfer, want expect) ([]byte, error) {
	frame, err := transferFrame(guid, t)
	if err != nil {
		return nil, err
	}
	return w.sendRaw(ctx, name, guid, t.String(), frame, want)
}

// sendRaw sends frame on the persistent connection and records the step.
func (w *world) sendRaw(_ context.Context, name, guid, sent string, frame []byte, want expect) ([]byte, error) {
	raw, a, err := send(w.conn, frame)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	w.record(step{Name: name, Sent: sent, GUID: guid, Got: a.Code}, a, want)
	return raw, nil
}

// replay sends t again with a fresh SENT_AT. If first is set, the answer
// must be those bytes exactly; note, if set, replaces the step's note.
func (w *world) replay(ctx context.Context, name, guid string, t transfer, first []byte, note string, want expect) error {
	raw, err := w.sendTransfer(ctx, name, guid, t, want)
	if err != nil {
		return err
	}
	s := &w.steps[len(w.steps)-1]
	s.Note = strings.TrimPrefix(s.Note+"; "+note, "; ")
	if first == nil {
		return nil
	}
	if bytes.Equal(raw, first) {
		s.Note += fmt.Sprintf(", same %d bytes", len(raw))
	} else {
		s.Problems = append(s.Problems, "answer differs from the first one")
	}
	return nil
}

// batchStep records a batch run's effect on one row.
func (w *world) batchStep(name, sent, guid string, sum *batch.Summary, want expect) {
	var counts []string
	sum.Each(func(outcome string, n int) {
		if n > 0 {
			counts = append(counts, fmt.Sprintf("%s=%d", outcome, n))
		}
	})
	s := step{Name: name, Sent: sent, GUID: guid, Batch: true, Note: sum.Command + ": " + strings.Join(counts, " ")}
	if row, err := w.led.Get(context.Background(), guid); err == nil {
		s.Got = generated.RspCode(row.RspCode)
	}
	w.record(s, channel.Answer{}, want)
}

// record completes s with what the core and the ledger saw, checks it
// against want, and appends it.
func (w *world) record(s step, a channel.Answer, want expect) {
	s.N = len(w.steps) + 1
	s.Want = want.code
	if s.Note == "" {
		s.Note = answerNote(a)
	}
	s.CorePosts = w.arrivals.count(s.GUID)
	w.waitRecorded()
	if row, err := w.led.Get(context.Background(), s.GUID); err == nil {
		s.State, s.Attempts = row.State, row.Attempts
	} else if !errors.Is(err, ledger.ErrNotFound) {
		s.Problems = append(s.Problems, "ledger: "+err.Error())
	}
	if s.Got != want.code {
		s.Problems = append(s.Problems, fmt.Sprintf("want %s", want.code))
	}
	if s.State != want.state || (want.state != "" && s.Attempts != want.attempts) {
		s.Problems = append(s.Problems, fmt.Sprintf("want ledger %s", stateText(want.state, want.attempts)))
	}
	if s.CorePosts != want.posts {
		s.Problems = append(s.Problems, fmt.Sprintf("want %d POSTs at the core", want.posts))
	}
	w.steps = append(w.steps, s)
}

// answerNote is what a 0000 answer's body says that matters to a person.
func answerNote(a channel.Answer) string {
	if a.Body == nil {
		return ""
	}
	switch b := a.Body.(type) {
	case *generated.BKTR0001Response:
		return "balance " + commas(b.Balance)
	case *generated.BKIQ0001Response:
		return "balance " + commas(b.Balance)
	}
	return ""
}

// demoGUID is the n-th GUID of the demo: the prefix, zeros, n in hex, as
// wide as the header's GUID field.
func demoGUID(n int) string {
	tail := strconv.FormatInt(int64(n), 16)
	width := len(channel.NewGUID())
	return guidPrefix + strings.Repeat("0", width-len(guidPrefix)-len(tail)) + tail
}

// shortGUID is a GUID as printed in the table: its prefix and its end.
func shortGUID(g string) string {
	const head, tail = 6, 4
	if len(g) <= head+tail {
		return g
	}
	return g[:head] + "…" + g[len(g)-tail:]
}

// commas formats n with thousands separators: 1,000,000.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func stateText(s ledger.State, attempts int) string {
	if s == "" {
		return "no row"
	}
	return fmt.Sprintf("%s/%d", s, attempts)
}
