package console

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/testkit"
)

// chromium finds Debian's Chromium (package chromium). Without it the
// browser tests skip with one line, unless LHRELAY_REQUIRE_BROWSER=1 (set
// by .ci/run) makes that a failure.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("LHRELAY_REQUIRE_BROWSER") == "1" {
		t.Fatal("chromium is not installed and LHRELAY_REQUIRE_BROWSER=1: apt-get install chromium")
	}
	t.Skip("chromium is not installed: the browser tests are skipped (apt-get install chromium)")
	return ""
}

// browser starts a headless Chromium of its own (a fresh profile, no
// background connections: the test machine's network is closed) and
// returns a tab's context, valid until the test ends.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelA()
	})
	// The first Run starts the browser; it lives as long as ctx.
	assert.NilError(t, chromedp.Do(ctx))
	return ctx
}

// eval evaluates a JavaScript expression in the page, within 20 s.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](expr))
	assert.NilError(t, err, expr)
	return v
}

func open(t *testing.T, ctx context.Context, url, ready string) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	assert.NilError(t, chromedp.Do(c, chromedp.Navigate(url), chromedp.WaitReady(ready)))
}

// TestBrowser opens the console's pages in Chromium and reads them
// through the DOM: a transfer that timed out at one relay and was settled
// by another, its timeline, its decoded fields, the masking, markup in
// memos kept as text, the overview's counts against ledger stats and
// their refresh without a reload. LHRELAY_CONSOLE_SCREENSHOT=FILE writes
// the GUID page's picture (the README's, docs/console-guid.png).
func TestBrowser(t *testing.T) {
	ctx := browser(t)
	w := sqliteWorld(t)
	ts, logs := serve(t, w.db, func(c *Config) { c.Refresh = 100 * time.Millisecond })
	browserPages(t, ctx, w, ts.URL, logs)
	t.Run("without a token: 401, logged", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "tokens")
		assert.NilError(t, os.WriteFile(path, []byte("alice 0123456789abcdef0123456789abcdef\n"), 0o600))
		tokens, err := ReadTokens(path)
		assert.NilError(t, err)
		ts, logs := serve(t, w.db, func(c *Config) { c.Tokens = tokens })
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		resp, err := chromedp.Run(c, chromedp.NavigateResponse(ts.URL+"/guid/"+w.settled))
		assert.NilError(t, err)
		assert.Check(t, is.Equal(resp.Status, int64(401)))
		assert.Check(t, is.Contains(eval[string](t, ctx, `document.body.textContent`), "401 unauthorized"))
		assert.Check(t, is.Contains(logs.String(), `request refused" status=401 method=GET path=/guid/`+w.settled))
		assert.Check(t, !strings.Contains(logs.String(), "guid viewed"))
	})
	if out := os.Getenv("LHRELAY_CONSOLE_SCREENSHOT"); out != "" {
		open(t, ctx, ts.URL+"/guid/"+w.settled, "#timeline")
		// Quality 100 is a PNG (below, a JPEG).
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		assert.NilError(t, err)
		assert.NilError(t, os.WriteFile(out, png, 0o644))
		t.Logf("screenshot written to %s", out)
	}
}

// The same pages on a PostgreSQL ledger the relays share.
func TestBrowserPostgres(t *testing.T) {
	ctx := browser(t)
	w := newWorld(t, pgtest.URL(t))
	ts, logs := serve(t, w.db, func(c *Config) { c.Refresh = 100 * time.Millisecond })
	browserPages(t, ctx, w, ts.URL, logs)
}

// browserPages is TestBrowser's checks, on either store.
func browserPages(t *testing.T, ctx context.Context, w *world, base string, logs *testkit.SyncBuffer) {
	t.Helper()
	t.Run("a GUID's page", func(t *testing.T) {
		open(t, ctx, base+"/guid/"+w.settled, "#timeline")
		after := eval[[]string](t, ctx, `[...document.querySelectorAll("#timeline .entry .after")].map(e => e.textContent)`)
		assert.DeepEqual(t, after, []string{"SENT", "UNKNOWN/E901", "DONE/0000"})
		actors := eval[[]string](t, ctx, `[...document.querySelectorAll("#timeline .entry .command")].map(e => e.textContent)`)
		assert.DeepEqual(t, actors, []string{"relay", "relay", "relay"})
		chains := eval[[]string](t, ctx, `[...document.querySelectorAll("#timeline .entry .actor .sub")].map(e => e.textContent.split(" ")[0])`)
		assert.Check(t, chains[0] == chains[1] && chains[1] != chains[2], "claimed and timed out at one relay, settled at another: %v", chains)
		reasons := eval[[]string](t, ctx, `[...document.querySelectorAll("#timeline .entry .reason")].map(e => e.textContent)`)
		assert.Check(t, is.Contains(reasons[2], "lookup"), "%v", reasons)
		assert.Check(t, eval[bool](t, ctx, `!!document.querySelector("#picture .lane") && document.querySelectorAll("#picture .lane").length === 2`))
		fields := eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll("#request-body tr[data-field]")].map(r => [r.dataset.field, r.querySelector(".value code").textContent]))`)
		assert.Check(t, is.Equal(fields["WD_ACCT"], "**********4007"))
		assert.Check(t, is.Equal(fields["DP_ACCT"], "**********4005"))
		assert.Check(t, is.Equal(fields["MEMO"], "SLOW rent"))
		assert.Check(t, is.Equal(fields["AMOUNT"], "1000"))
		rsp := eval[[]string](t, ctx, `[...document.querySelectorAll("#response-body tr[data-field]")].map(r => r.dataset.field)`)
		assert.DeepEqual(t, rsp, []string{"CORE_TXID", "BALANCE", "POSTED_AT"})
		assert.Check(t, !eval[bool](t, ctx, `document.body.textContent.includes("`+w.wdAcct+`")`), "the whole account number is on the page")
		assert.Check(t, is.Contains(eval[string](t, ctx, `document.getElementById("chain").textContent`), "History verifies"))
		assert.Check(t, is.Contains(logs.String(), "guid viewed\" guid="+w.settled))
	})

	t.Run("markup in memos is text, and no script ran", func(t *testing.T) {
		for guid, memo := range map[string]string{w.xssScript: memoScript, w.xssImg: memoImg} {
			open(t, ctx, base+"/guid/"+guid, "#timeline")
			got := eval[string](t, ctx, `document.querySelector('#request-body tr[data-field="MEMO"] .value code').textContent`)
			assert.Check(t, is.Equal(got, memo))
			assert.Check(t, eval[bool](t, ctx, `typeof window.x === "undefined"`), "the memo's script ran")
			assert.Check(t, is.Equal(eval[int](t, ctx, `document.querySelectorAll("main script, main img").length`), 0))
			// Our own script is the only one, from the console itself.
			assert.DeepEqual(t, eval[[]string](t, ctx, `[...document.scripts].map(s => new URL(s.src).pathname)`), []string{"/assets/console.js"})
		}
	})

	t.Run("the overview's counts are ledger stats, refreshed without a reload", func(t *testing.T) {
		open(t, ctx, base+"/", "#overview")
		l, err := ledger.OpenReadOnly(w.db)
		assert.NilError(t, err)
		defer l.Close()
		st, err := l.Stats(context.Background())
		assert.NilError(t, err)
		shown := func() map[string]string {
			return eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll("#by-state [data-k]")].map(e => [e.dataset.k, e.textContent]))`)
		}
		got := shown()
		for _, s := range ledger.States {
			assert.Check(t, is.Equal(got["byState."+string(s)], strconv.FormatInt(st.ByState[s], 10)), "state %s", s)
		}
		assert.Check(t, is.Equal(got["total"], strconv.FormatInt(st.Total, 10)))
		assert.Check(t, is.Equal(eval[string](t, ctx, `document.querySelector('[data-k="outOfAttempts"]').textContent`), "1"))

		// A new DONE row appears without the page being loaded again.
		eval[bool](t, ctx, `window.notReloaded = true`)
		guid := testkit.GUID()
		assert.Equal(t, code(t, sendTo(t, w.relay, testkit.Transfer(t, guid, nil))), generated.RspHTTP200)
		want := strconv.FormatInt(st.ByState[ledger.StateDone]+1, 10)
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err = chromedp.Run(c, chromedp.Poll[bool](`document.querySelector('#by-state [data-k="byState.DONE"]').textContent === "`+want+`"`, chromedp.WithPollingInterval(50*time.Millisecond)))
		assert.NilError(t, err, "the overview did not show the new row: %v", eval[map[string]string](t, ctx, `({done: document.querySelector('#by-state [data-k="byState.DONE"]').textContent, refreshed: String(document.getElementById("overview").getAttribute("data-refreshed")), error: document.querySelector('[data-k="error"]').textContent})`))
		assert.Check(t, eval[bool](t, ctx, `window.notReloaded === true`))
	})

	t.Run("rows that need a person", func(t *testing.T) {
		open(t, ctx, base+"/needs", "main")
		guids := eval[[]string](t, ctx, `[...document.querySelectorAll("#needs tr[data-guid]")].map(r => r.dataset.guid)`)
		assert.DeepEqual(t, guids, []string{w.out})
	})
}

// The README's account of the API's JSON stays what the page shows.
func TestOverviewJSON(t *testing.T) {
	w := sqliteWorld(t)
	ts, _ := serve(t, w.db, nil)
	_, body, _ := get(t, ts.URL+"/api/overview")
	var o overviewJSON
	assert.NilError(t, json.Unmarshal([]byte(body), &o))
	assert.Check(t, is.Equal(o.ByState["DONE"], int64(3)))
	assert.Check(t, is.Equal(o.OutOfAttempts, int64(1)))
	assert.Check(t, is.Equal(o.Total, int64(4)))
}
