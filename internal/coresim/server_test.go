package coresim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/coresim"
)

const (
	acctRich  = "11002003004005" // 1,000,000
	acctEmpty = "11002003004006" // 0
	acctHuge  = "11002003004007" // 100,000,000
)

var fixedNow = time.Date(2026, 11, 29, 10, 30, 0, 0, time.FixedZone("KST", 9*3600))

func clock() time.Time { return fixedNow }

// start serves a new simulator over real HTTP.
func start(t *testing.T, cfg coresim.Config) (*coresim.Server, string) {
	t.Helper()
	if cfg.Now == nil {
		cfg.Now = clock
	}
	sim := coresim.New(cfg)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return sim, srv.URL
}

func guid(n int) string { return fmt.Sprintf("%032x", n) }

// transfer is a well-formed request body; tests change fields as needed.
func transfer(g string, amount int64, memo string) map[string]any {
	return map[string]any{
		"guid": g, "wdBank": "LHB", "wdAcct": acctRich,
		"dpBank": "LHB", "dpAcct": acctEmpty, "amount": amount, "memo": memo,
	}
}

type answer struct {
	status int
	body   map[string]any
	raw    string
}

// do sends one request; body may be nil, a string (sent as is) or a value to
// marshal. xguid "" sends no X-GUID header.
func do(t *testing.T, client *http.Client, method, url, xguid string, body any) answer {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		assert.NilError(t, err)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, rd)
	assert.NilError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if xguid != "" {
		req.Header.Set("X-GUID", xguid)
	}
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	assert.NilError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	assert.NilError(t, err)
	a := answer{status: resp.StatusCode, raw: string(raw)}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && len(raw) > 0 {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		assert.NilError(t, d.Decode(&a.body), "body %q", raw)
	}
	return a
}

func post(t *testing.T, url string, body map[string]any) answer {
	t.Helper()
	return do(t, nil, http.MethodPost, url+"/v1/transfers", body["guid"].(string), body)
}

func balance(t *testing.T, sim *coresim.Server, acct string) int64 {
	t.Helper()
	b, ok := sim.Balance("LHB", acct)
	assert.Assert(t, ok, "account %s", acct)
	return b
}

func TestTransferPosted(t *testing.T) {
	sim, url := start(t, coresim.Config{})
	g := guid(1)

	a := post(t, url, transfer(g, 50_000, "rent"))
	assert.Equal(t, a.status, http.StatusOK, a.raw)
	assert.Equal(t, a.raw, `{"guid":"`+g+`","txId":"T000000000000001","balance":950000,"postedAt":"20261129103000"}`)
	assert.Equal(t, balance(t, sim, acctRich), int64(950_000))
	assert.Equal(t, balance(t, sim, acctEmpty), int64(50_000), "deposit credited")
	assert.Assert(t, sim.Posted(g))

	// The second transfer gets the next txId and sees the first one's debit.
	a = post(t, url, transfer(guid(2), 950_000, ""))
	assert.Equal(t, a.status, http.StatusOK, a.raw)
	assert.Equal(t, a.body["txId"], "T000000000000002")
	assert.Equal(t, a.body["balance"], json.Number("0"), "the whole balance may go")
}

func TestTransferDepositElsewhere(t *testing.T) {
	sim, url := start(t, coresim.Config{})
	for i, dp := range []struct{ bank, acct string }{
		{"KBK", acctEmpty},        // another bank: not ours to credit
		{"LHB", "99999999999999"}, // not an account of ours
	} {
		body := transfer(guid(i+1), 1000, "")
		body["dpBank"], body["dpAcct"] = dp.bank, dp.acct
		a := post(t, url, body)
		assert.Equal(t, a.status, http.StatusOK, a.raw)
	}
	assert.Equal(t, balance(t, sim, acctRich), int64(998_000))
	assert.Equal(t, balance(t, sim, acctEmpty), int64(0))
}

func TestTransferRefused(t *testing.T) {
	sim, url := start(t, coresim.Config{})
	cases := []struct {
		name   string
		change func(map[string]any)
		result string
	}{
		{"unknown account", func(b map[string]any) { b["wdAcct"] = "99999999999999" }, "NO_ACCOUNT"},
		{"other bank", func(b map[string]any) { b["wdBank"] = "KBK" }, "NO_ACCOUNT"},
		{"no account wins over limit", func(b map[string]any) {
			b["wdAcct"] = "99999999999999"
			b["amount"] = 20_000_000
		}, "NO_ACCOUNT"},
		{"over limit", func(b map[string]any) {
			b["wdAcct"] = acctHuge
			b["amount"] = 10_000_001
		}, "LIMIT_EXCEEDED"},
		{"limit wins over balance", func(b map[string]any) { b["amount"] = 20_000_000 }, "LIMIT_EXCEEDED"},
		{"over balance", func(b map[string]any) { b["amount"] = 1_000_001 }, "INSUFFICIENT_FUNDS"},
		{"empty account", func(b map[string]any) { b["wdAcct"] = acctEmpty }, "INSUFFICIENT_FUNDS"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := guid(100 + i)
			body := transfer(g, 1000, "")
			tc.change(body)
			a := post(t, url, body)
			assert.Equal(t, a.status, http.StatusUnprocessableEntity, a.raw)
			assert.DeepEqual(t, a.body, map[string]any{"guid": g, "result": tc.result})
			assert.Assert(t, !sim.Posted(g))
		})
	}
	// The limit itself is allowed.
	body := transfer(guid(1), 10_000_000, "")
	body["wdAcct"] = acctHuge
	assert.Equal(t, post(t, url, body).status, http.StatusOK)

	assert.Equal(t, balance(t, sim, acctRich), int64(1_000_000))
	assert.Equal(t, balance(t, sim, acctHuge), int64(90_000_000))
	assert.Equal(t, balance(t, sim, acctEmpty), int64(10_000_000))
}

func TestTransferLimitConfig(t *testing.T) {
	_, url := start(t, coresim.Config{Limit: 500})
	assert.Equal(t, post(t, url, transfer(guid(1), 500, "")).status, http.StatusOK)
	a := post(t, url, transfer(guid(2), 501, ""))
	assert.Equal(t, a.body["result"], "LIMIT_EXCEEDED")
}

func TestTransferFail(t *testing.T) {
	sim, url := start(t, coresim.Config{})
	g := guid(1)
	a := post(t, url, transfer(g, 1000, "FAIL please"))
	assert.Equal(t, a.status, http.StatusInternalServerError)
	assert.Check(t, is.Contains(a.body["error"], "FAIL"))
	assert.Assert(t, !sim.Posted(g))
	assert.Equal(t, balance(t, sim, acctRich), int64(1_000_000))

	// Only a prefix counts.
	assert.Equal(t, post(t, url, transfer(guid(2), 1000, "no FAIL")).status, http.StatusOK)
}

func TestTransferBadRequest(t *testing.T) {
	sim, url := start(t, coresim.Config{})
	g := "0123456789abcdef0123456789abcdef"
	good := func() map[string]any { return transfer(g, 1000, "") }
	with := func(k string, v any) map[string]any {
		b := good()
		b[k] = v
		return b
	}
	without := func(k string) map[string]any {
		b := good()
		delete(b, k)
		return b
	}
	cases := []struct {
		name  string
		xguid string
		body  any
		msg   string
	}{
		{"not json", g, `{"guid":`, "invalid JSON"},
		{"array", g, `[1]`, "invalid JSON"},
		{"empty body", g, ``, "invalid JSON"},
		{"two objects", g, `{"guid":"` + g + `"} {}`, "data after the object"},
		{"unknown field", g, with("wdBnak", "LHB"), "unknown field"},
		{"guid missing", g, without("guid"), "guid missing"},
		{"guid upper case", strings.ToUpper(g), with("guid", strings.ToUpper(g)), "32 lowercase hex"},
		{"guid short", g[:31], with("guid", g[:31]), "32 lowercase hex"},
		{"guid not hex", "g" + g[1:], with("guid", "g"+g[1:]), "32 lowercase hex"},
		{"guid not string", g, with("guid", 12), "invalid JSON"},
		{"header missing", "", good(), "X-GUID header missing"},
		{"header differs", guid(8), good(), "differs"},
		{"wdBank missing", g, without("wdBank"), "wdBank missing"},
		{"wdAcct empty", g, with("wdAcct", ""), "wdAcct missing"},
		{"dpBank missing", g, without("dpBank"), "dpBank missing"},
		{"dpAcct missing", g, without("dpAcct"), "dpAcct missing"},
		{"amount missing", g, without("amount"), "amount missing"},
		{"amount null", g, with("amount", nil), "JSON integer"},
		{"amount fraction", g, with("amount", json.Number("1.5")), "JSON integer"},
		{"amount point zero", g, with("amount", json.Number("100.0")), "JSON integer"},
		{"amount exponent", g, with("amount", json.Number("1e3")), "JSON integer"},
		{"amount string", g, with("amount", "100"), "JSON integer"},
		{"amount bool", g, with("amount", true), "JSON integer"},
		{"amount too big", g, with("amount", json.Number("9223372036854775808")), "JSON integer"},
		{"amount zero", g, with("amount", 0), "> 0"},
		{"amount negative", g, with("amount", -5), "> 0"},
		{"memo not string", g, with("memo", 5), "invalid JSON"},
		{"too big", g, `{"memo":"` + strings.Repeat("x", 70_000) + `"}`, "over 65536 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, nil, http.MethodPost, url+"/v1/transfers", tc.xguid, tc.body)
			assert.Equal(t, a.status, http.StatusBadRequest, a.raw)
			assert.Check(t, is.Contains(a.body["error"], tc.msg))
		})
	}
	assert.Assert(t, !sim.Posted(g))
	assert.Equal(t, balance(t, sim, acctRich), int64(1_000_000))
	assert.Equal(t, balance(t, sim, acctEmpty), int64(0))

	// Every call is counted, 400s included; by_guid only under a
	// well-formed X-GUID.
	st := sim.Stats()
	assert.Equal(t, st.Calls, len(cases))
	var byGUID int
	for _, n := range st.ByGUID {
		byGUID += n
	}
	assert.Equal(t, byGUID, len(cases)-4) // minus: upper case, short, not hex, missing
}

func TestSameGUIDTwice(t *testing.T) {
	sim, url := start(t, coresim.Config{})
	g := guid(1)
	first := post(t, url, transfer(g, 100_000, "one"))
	second := post(t, url, transfer(g, 100_000, "two"))
	assert.Equal(t, first.status, http.StatusOK)
	assert.Equal(t, second.status, http.StatusOK)
	assert.Equal(t, second.body["balance"], json.Number("800000"), "debited twice: not idempotent")
	assert.Equal(t, balance(t, sim, acctRich), int64(800_000))
	assert.Equal(t, sim.PostCount(g), 2)
	assert.DeepEqual(t, sim.Stats(), coresim.Stats{Calls: 2, ByGUID: map[string]int{g: 2}})

	// The lookup answers with the first posting, byte for byte.
	got := do(t, nil, http.MethodGet, url+"/v1/transfers/"+g, "", nil)
	assert.Equal(t, got.status, http.StatusOK)
	assert.Equal(t, got.raw, first.raw)

	// A refused call counts as a call but not as a posting.
	post(t, url, transfer(g, 5_000_000, ""))
	assert.Equal(t, sim.PostCount(g), 2)
	assert.Equal(t, sim.Stats().ByGUID[g], 3)
}

func TestGetTransfer(t *testing.T) {
	_, url := start(t, coresim.Config{})
	g := guid(1)
	a := do(t, nil, http.MethodGet, url+"/v1/transfers/"+g, "", nil)
	assert.Equal(t, a.status, http.StatusNotFound)
	assert.Check(t, is.Contains(a.body["error"], "no transfer"))

	// Refused and failed transfers are not posted, so not found either.
	post(t, url, transfer(g, 5_000_000, ""))
	post(t, url, transfer(g, 1, "FAIL"))
	assert.Equal(t, do(t, nil, http.MethodGet, url+"/v1/transfers/"+g, "", nil).status, http.StatusNotFound)

	posted := post(t, url, transfer(g, 1, ""))
	a = do(t, nil, http.MethodGet, url+"/v1/transfers/"+g, "", nil)
	assert.Equal(t, a.status, http.StatusOK)
	assert.Equal(t, a.raw, posted.raw)
}

func TestGetAccount(t *testing.T) {
	_, url := start(t, coresim.Config{})
	a := do(t, nil, http.MethodGet, url+"/v1/accounts/LHB/"+acctRich, "", nil)
	assert.Equal(t, a.status, http.StatusOK)
	assert.Equal(t, a.raw, `{"bank":"LHB","acct":"11002003004005","balance":1000000,"asOf":"20261129103000"}`)

	for _, path := range []string{"/v1/accounts/LHB/99999999999999", "/v1/accounts/KBK/" + acctRich} {
		a = do(t, nil, http.MethodGet, url+path, "", nil)
		assert.Equal(t, a.status, http.StatusNotFound, path)
		assert.Check(t, is.Contains(a.body["error"], "no such account"))
	}

	post(t, url, transfer(guid(1), 1234, ""))
	a = do(t, nil, http.MethodGet, url+"/v1/accounts/LHB/"+acctEmpty, "", nil)
	assert.Equal(t, a.body["balance"], json.Number("1234"))
}

func TestStatsAndReset(t *testing.T) {
	sim, url := start(t, coresim.Config{})
	a := do(t, nil, http.MethodGet, url+"/_stats", "", nil)
	assert.Equal(t, a.status, http.StatusOK)
	assert.Equal(t, a.raw, `{"calls":0,"by_guid":{}}`)

	post(t, url, transfer(guid(1), 10, ""))
	post(t, url, transfer(guid(2), 10, ""))
	post(t, url, transfer(guid(2), 10, ""))
	do(t, nil, http.MethodGet, url+"/v1/transfers/"+guid(1), "", nil) // not counted
	a = do(t, nil, http.MethodGet, url+"/_stats", "", nil)
	assert.Equal(t, a.raw, fmt.Sprintf(`{"calls":3,"by_guid":{"%s":1,"%s":2}}`, guid(1), guid(2)))

	a = do(t, nil, http.MethodPost, url+"/_reset", "", nil)
	assert.Equal(t, a.status, http.StatusNoContent)
	assert.Equal(t, do(t, nil, http.MethodGet, url+"/_stats", "", nil).raw, `{"calls":0,"by_guid":{}}`)
	// Reset leaves the books alone.
	assert.Equal(t, balance(t, sim, acctRich), int64(999_970))
	assert.Assert(t, sim.Posted(guid(2)))

	post(t, url, transfer(guid(3), 10, ""))
	sim.Reset()
	assert.DeepEqual(t, sim.Stats(), coresim.Stats{Calls: 0, ByGUID: map[string]int{}})
}

func TestRouting(t *testing.T) {
	_, url := start(t, coresim.Config{})
	cases := []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/", http.StatusNotFound},
		{http.MethodGet, "/v1/nothing", http.StatusNotFound},
		{http.MethodPost, "/v1/transfers/x/y", http.StatusNotFound},
		{http.MethodGet, "/v1/transfers", http.StatusMethodNotAllowed},
		{http.MethodPut, "/v1/transfers", http.StatusMethodNotAllowed},
		{http.MethodPost, "/v1/transfers/" + guid(1), http.StatusMethodNotAllowed},
		{http.MethodDelete, "/v1/accounts/LHB/" + acctRich, http.StatusMethodNotAllowed},
		{http.MethodPost, "/_stats", http.StatusMethodNotAllowed},
		{http.MethodGet, "/_reset", http.StatusMethodNotAllowed},
	}
	for _, tc := range cases {
		a := do(t, nil, tc.method, url+tc.path, "", nil)
		assert.Check(t, is.Equal(a.status, tc.status), "%s %s", tc.method, tc.path)
	}
}

// TestConcurrentDebits checks that check-and-debit is atomic: concurrent
// transfers from one account neither lose updates nor overdraw it.
func TestConcurrentDebits(t *testing.T) {
	sim, url := start(t, coresim.Config{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(client.CloseIdleConnections)

	run := func(n, from int, amount int64) (ok, refused int) {
		var okN, refusedN atomic.Int64
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for i := range n {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				body := transfer(guid(from+i), amount, "")
				a := do(t, client, http.MethodPost, url+"/v1/transfers", body["guid"].(string), body)
				switch {
				case a.status == http.StatusOK:
					okN.Add(1)
				case a.status == http.StatusUnprocessableEntity && a.body["result"] == "INSUFFICIENT_FUNDS":
					refusedN.Add(1)
				default:
					t.Errorf("unexpected answer %d %s", a.status, a.raw)
				}
			})
		}
		wg.Wait()
		return int(okN.Load()), int(refusedN.Load())
	}

	// 200 debits of 1,000 from 1,000,000: all succeed, sums exact.
	ok, refused := run(200, 0, 1000)
	assert.Equal(t, ok, 200)
	assert.Equal(t, refused, 0)
	assert.Equal(t, balance(t, sim, acctRich), int64(800_000))
	assert.Equal(t, balance(t, sim, acctEmpty), int64(200_000))

	// 900 more against the remaining 800,000: exactly 800 fit.
	ok, refused = run(900, 1000, 1000)
	assert.Equal(t, ok, 800)
	assert.Equal(t, refused, 100)
	assert.Equal(t, balance(t, sim, acctRich), int64(0))
	assert.Equal(t, balance(t, sim, acctEmpty), int64(1_000_000))
	assert.Equal(t, sim.Stats().Calls, 1100)
}

// TestSlowPostsAfterCallerLeft: a SLOW transfer is posted after the delay even
// though the caller timed out long before. The caller waits long enough
// for its request to arrive on a loaded machine (a 20 ms wait once gave
// up before the request was read), and the delay is twice that.
func TestSlowPostsAfterCallerLeft(t *testing.T) {
	const wait = time.Second
	const delay = 2 * wait
	sim, url := start(t, coresim.Config{Delay: delay})
	g := guid(1)
	body, err := json.Marshal(transfer(g, 1000, "SLOW rent"))
	assert.NilError(t, err)

	begin := time.Now()
	client := &http.Client{Timeout: wait}
	req, err := http.NewRequest(http.MethodPost, url+"/v1/transfers", bytes.NewReader(body))
	assert.NilError(t, err)
	req.Header.Set("X-GUID", g)
	_, err = client.Do(req)
	assert.ErrorContains(t, err, "Client.Timeout")
	assert.Assert(t, !sim.Posted(g), "posted before the delay was over")
	assert.Equal(t, sim.Stats().ByGUID[g], 1, "the call was received")

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	assert.NilError(t, sim.WaitPosted(ctx, g))
	assert.Assert(t, time.Since(begin) >= delay, "posted after %v", time.Since(begin))
	assert.Equal(t, balance(t, sim, acctRich), int64(999_000))
	assert.Equal(t, balance(t, sim, acctEmpty), int64(1000))

	// And a patient caller gets the normal answer.
	a := post(t, url, transfer(guid(2), 1000, "SLOW"))
	assert.Equal(t, a.status, http.StatusOK, a.raw)
	assert.Equal(t, a.body["balance"], json.Number("998000"))
}

func TestWaitPostedTimeout(t *testing.T) {
	sim, _ := start(t, coresim.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, sim.WaitPosted(ctx, guid(1)), context.DeadlineExceeded)
}

func TestNoDelay(t *testing.T) {
	_, url := start(t, coresim.Config{Delay: -1})
	begin := time.Now()
	assert.Equal(t, post(t, url, transfer(guid(1), 1, "SLOW")).status, http.StatusOK)
	assert.Assert(t, time.Since(begin) < coresim.DefaultDelay)
}

func TestCustomAccounts(t *testing.T) {
	sim, url := start(t, coresim.Config{Accounts: []coresim.Account{
		{Bank: "LHB", Acct: "00000000000001", Balance: 10},
	}})
	_, ok := sim.Balance("LHB", acctRich)
	assert.Assert(t, !ok, "the built-in set is replaced, not extended")
	body := transfer(guid(1), 10, "")
	body["wdAcct"] = "00000000000001"
	assert.Equal(t, post(t, url, body).status, http.StatusOK)
	assert.Equal(t, balance(t, sim, "00000000000001"), int64(0))
}

func TestDefaultAccounts(t *testing.T) {
	sim := coresim.New(coresim.Config{})
	for _, a := range coresim.DefaultAccounts() {
		b, ok := sim.Balance(a.Bank, a.Acct)
		assert.Assert(t, ok)
		assert.Equal(t, b, a.Balance)
	}
	assert.DeepEqual(t, coresim.DefaultAccounts(), []coresim.Account{
		{Bank: "LHB", Acct: acctRich, Balance: 1_000_000},
		{Bank: "LHB", Acct: acctEmpty, Balance: 0},
		{Bank: "LHB", Acct: acctHuge, Balance: 100_000_000},
	})
}

// TestMaxConcurrent: with two places and 50 ms a request, six requests at
// once take three turns (at least 150 ms in all, where unbounded they would
// take one), and every one of them is served.
func TestMaxConcurrent(t *testing.T) {
	const service = 50 * time.Millisecond
	sim, url := start(t, coresim.Config{MaxConcurrent: 2, Service: service, Accounts: []coresim.Account{{Bank: "LHB", Acct: acctRich, Balance: 1_000_000}}})
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			a := post(t, url, transfer(guid(9000+i), 100, "queued"))
			assert.Equal(t, a.status, http.StatusOK, a.raw)
		})
	}
	wg.Wait()
	took := time.Since(start)
	assert.Assert(t, took >= 3*service, "six requests two at a time took %v", took)
	for i := range 6 {
		assert.Equal(t, sim.PostCount(guid(9000+i)), 1)
	}
}

// TestRefuseBeyond: with two places, RefuseBeyond and 100 ms a request,
// the requests beyond the two served are answered 503 at once, with
// nothing posted, and counted as calls; the two are posted.
func TestRefuseBeyond(t *testing.T) {
	const service = 100 * time.Millisecond
	sim, url := start(t, coresim.Config{MaxConcurrent: 2, RefuseBeyond: true, Service: service, Accounts: []coresim.Account{{Bank: "LHB", Acct: acctRich, Balance: 1_000_000}}})
	held := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			a := post(t, url, transfer(guid(9100+i), 100, "served"))
			assert.Equal(t, a.status, http.StatusOK, a.raw)
		})
	}
	go func() { wg.Wait(); close(held) }()
	deadline := time.Now().Add(5 * time.Second)
	for sim.Serving() < 2 {
		assert.Assert(t, time.Now().Before(deadline), "two requests never reached the core")
		runtime.Gosched()
	}
	t0 := time.Now()
	a := post(t, url, transfer(guid(9102), 100, "refused"))
	took := time.Since(t0)
	assert.Equal(t, a.status, http.StatusServiceUnavailable, a.raw)
	assert.Assert(t, took < service, "a refusal waited %v", took)
	<-held
	assert.Equal(t, sim.PostCount(guid(9102)), 0)
	assert.Equal(t, sim.Refused(), int64(1))
	assert.Equal(t, sim.Stats().ByGUID[guid(9102)], 1, "a refused call is still a call")
	for i := range 2 {
		assert.Equal(t, sim.PostCount(guid(9100+i)), 1)
	}
}
