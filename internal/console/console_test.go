package console

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/testkit"
	"lhrelay/internal/tlsconf"
)

// serve starts a console on w's ledger, opened read-only.
func serve(t *testing.T, db string, edit func(*Config)) (*httptest.Server, *testkit.SyncBuffer) {
	t.Helper()
	l, err := ledger.OpenReadOnly(db)
	assert.NilError(t, err)
	t.Cleanup(func() { l.Close() })
	logs := &testkit.SyncBuffer{}
	cfg := Config{Ledger: l, Refresh: 50 * time.Millisecond, Log: slog.New(slog.NewTextHandler(logs, nil))}
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg)
	assert.NilError(t, err)
	t.Cleanup(s.Close)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts, logs
}

func get(t *testing.T, url string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	assert.NilError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	assert.NilError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	assert.NilError(t, err)
	return resp.StatusCode, string(b), resp.Header
}

func TestConsole(t *testing.T) {
	w := sqliteWorld(t)
	ts, logs := serve(t, w.db, nil)

	t.Run("the replay was the stored response", func(t *testing.T) {
		assert.Check(t, bytes.Equal(w.replay, w.stored))
	})

	t.Run("a GUID's page", func(t *testing.T) {
		status, body, hdr := get(t, ts.URL+"/guid/"+w.settled)
		assert.Equal(t, status, 200, body)
		assert.Check(t, is.Contains(hdr.Get("Content-Security-Policy"), "script-src 'self'"))
		assert.Check(t, !strings.Contains(hdr.Get("Content-Security-Policy"), "unsafe-inline"))
		// The timeline, oldest first: the claim, relay A's timeout, relay
		// B's settling.
		after := regexp.MustCompile(`<span class="after">([^<]*)</span>`).FindAllStringSubmatch(body, -1)
		var got []string
		for _, m := range after {
			got = append(got, m[1])
		}
		assert.DeepEqual(t, got, []string{"SENT", "UNKNOWN/E901", "DONE/0000"})
		assert.Check(t, is.Contains(body, `id="picture"`), "two relays took part: drawn")
		assert.Check(t, is.Contains(body, "History verifies"))
		// Decoded by name, the account masked but for its last four.
		assert.Check(t, is.Regexp(`data-field="WD_ACCT"><th>WD_ACCT</th><td class="json">wdAcct</td><td class="value masked"><code>\*{10}4007</code>`, body))
		assert.Check(t, !strings.Contains(body, w.wdAcct), "the whole account number is nowhere on the page")
		assert.Check(t, is.Contains(body, `data-field="CORE_TXID"`))
		assert.Check(t, is.Contains(logs.String(), "guid viewed"))
		assert.Check(t, is.Regexp(`guid viewed" guid=`+w.settled+` who="loopback 127\.0\.0\.1:\d+"`, logs.String()))
	})

	t.Run("markup in a memo is text", func(t *testing.T) {
		for guid, memo := range map[string]string{w.xssScript: memoScript, w.xssImg: memoImg} {
			_, body, _ := get(t, ts.URL+"/guid/"+guid)
			assert.Check(t, !strings.Contains(body, memo), "memo %q unescaped", memo)
			assert.Check(t, is.Contains(body, strings.NewReplacer("<", "&lt;", ">", "&gt;", `"`, "&#34;").Replace(memo)))
		}
	})

	t.Run("rows that need a person", func(t *testing.T) {
		_, body, _ := get(t, ts.URL+"/needs")
		assert.Check(t, is.Contains(body, `data-guid="`+w.out+`"`))
		assert.Check(t, is.Contains(body, "out of attempts"))
		assert.Check(t, !strings.Contains(body, `data-guid="`+w.settled+`"`), "a DONE row needs nobody")
		_, body, _ = get(t, ts.URL+"/needs?need=unknown")
		assert.Check(t, !strings.Contains(body, `data-guid="`+w.out+`"`))
	})

	t.Run("search by prefix", func(t *testing.T) {
		resp, err := http.Get(ts.URL + "/search?q=" + w.out)
		assert.NilError(t, err)
		resp.Body.Close()
		assert.Equal(t, resp.Request.URL.Path, "/guid/"+w.out, "one match goes to its page")
		_, body, _ := get(t, ts.URL+"/search?q="+w.out[:28])
		for _, g := range []string{w.settled, w.xssScript, w.xssImg, w.out} {
			assert.Check(t, is.Contains(body, `href="/guid/`+g+`"`))
		}
		_, body, _ = get(t, ts.URL+"/search?q=zz")
		assert.Check(t, is.Contains(body, "a GUID is 32 hex digits"))
	})

	t.Run("bad requests", func(t *testing.T) {
		status, _, _ := get(t, ts.URL+"/guid/nothex")
		assert.Check(t, is.Equal(status, 400))
		status, _, _ = get(t, ts.URL+"/guid/"+strings.Repeat("0", 32))
		assert.Check(t, is.Equal(status, 404))
		status, _, _ = get(t, ts.URL+"/needs?after=junk")
		assert.Check(t, is.Equal(status, 400))
		resp, err := http.Post(ts.URL+"/", "text/plain", nil)
		assert.NilError(t, err)
		resp.Body.Close()
		assert.Check(t, is.Equal(resp.StatusCode, 405))
	})
}

// The pages of rows follow one another by the next link, which keeps the
// filters, until the last.
func TestNeedsPages(t *testing.T) {
	w := sqliteWorld(t)
	// Two more FAILED/E902 rows, one attempt each.
	var failed []string
	for range 2 {
		g := testkit.GUID()
		assert.Equal(t, code(t, sendTo(t, w.down, testkit.Transfer(t, g, nil))), generated.RspConnectFail)
		waitRow(t, w.db, g, func(r ledger.Row) bool { return r.State == ledger.StateFailed })
		failed = append(failed, g)
	}
	ts, _ := serve(t, w.db, func(c *Config) { c.PageSize = 1 })
	next := "/needs?need=out&need=failed&tx=BKTR0001"
	var seen []string
	for i := 0; next != "" && i < 10; i++ {
		status, body, _ := get(t, ts.URL+next)
		assert.Equal(t, status, 200, body)
		for _, m := range regexp.MustCompile(`data-guid="([0-9a-f]{32})"`).FindAllStringSubmatch(body, -1) {
			seen = append(seen, m[1])
		}
		next = ""
		if m := regexp.MustCompile(`id="next" href="([^"]*)"`).FindStringSubmatch(body); m != nil {
			next = strings.ReplaceAll(m[1], "&amp;", "&")
			assert.Check(t, is.Contains(next, "need=out"), "the filters are kept: %s", next)
			assert.Check(t, is.Contains(next, "tx=BKTR0001"), "the filters are kept: %s", next)
		}
	}
	assert.DeepEqual(t, seen, []string{w.out, failed[0], failed[1]})
}

// Show-accounts shows them whole.
func TestShowAccounts(t *testing.T) {
	w := sqliteWorld(t)
	ts, _ := serve(t, w.db, func(c *Config) { c.ShowAccounts = true })
	_, body, _ := get(t, ts.URL+"/guid/"+w.settled)
	assert.Check(t, is.Contains(body, "<code>"+w.wdAcct+"</code>"))
}

func TestMask(t *testing.T) {
	assert.Equal(t, mask("11002003004007"), "**********4007")
	assert.Equal(t, mask("1234"), "****")
	assert.Equal(t, mask(""), "")
}

// Tokens: none is 401, an unknown one 403, both logged; a known one is
// its name in the access log.
func TestTokens(t *testing.T) {
	w := sqliteWorld(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	const tok = "0123456789abcdef0123456789abcdef"
	assert.NilError(t, os.WriteFile(path, []byte("# ops\nalice "+tok+"\n"), 0o644))
	_, err := ReadTokens(path)
	assert.ErrorContains(t, err, "readable by its owner only")
	assert.NilError(t, os.Chmod(path, 0o600))
	tokens, err := ReadTokens(path)
	assert.NilError(t, err)
	ts, logs := serve(t, w.db, func(c *Config) { c.Tokens = tokens })

	status, _, _ := get(t, ts.URL+"/guid/"+w.settled)
	assert.Check(t, is.Equal(status, 401))
	status, _, _ = get(t, ts.URL+"/guid/"+w.settled, "Authorization", "Bearer "+strings.Repeat("x", 32))
	assert.Check(t, is.Equal(status, 403))
	assert.Check(t, is.Contains(logs.String(), `request refused" status=401`))
	assert.Check(t, is.Contains(logs.String(), `request refused" status=403`))
	assert.Check(t, !strings.Contains(logs.String(), "guid viewed"), "nothing was shown")

	status, body, _ := get(t, ts.URL+"/guid/"+w.settled, "Authorization", "Bearer "+tok)
	assert.Equal(t, status, 200, body)
	assert.Check(t, is.Contains(logs.String(), `guid viewed" guid=`+w.settled+` who="token alice"`))

	// A browser logs in once; the cookie carries the token.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.PostForm(ts.URL+"/login", url.Values{"token": {"wrong"}})
	assert.NilError(t, err)
	resp.Body.Close()
	assert.Check(t, is.Equal(resp.StatusCode, 403))
	resp, err = noRedirect.PostForm(ts.URL+"/login", url.Values{"token": {tok}})
	assert.NilError(t, err)
	resp.Body.Close()
	assert.Check(t, is.Equal(resp.StatusCode, 303))
	cs := resp.Cookies()
	assert.Assert(t, is.Len(cs, 1))
	assert.Check(t, cs[0].HttpOnly && cs[0].SameSite == http.SameSiteStrictMode)
	status, _, _ = get(t, ts.URL+"/needs", "Cookie", cs[0].Name+"="+cs[0].Value)
	assert.Check(t, is.Equal(status, 200))
}

func TestCheckListen(t *testing.T) {
	for _, c := range []struct {
		listen             string
		tls, certs, tokens bool
		ok                 bool
	}{
		{"127.0.0.1:8088", false, false, false, true},
		{"localhost:8088", false, false, false, true},
		{"[::1]:8088", false, false, false, true},
		{"0.0.0.0:8088", false, false, true, false},
		{":8088", false, true, false, false},
		{"10.1.2.3:8088", true, false, false, false},
		{"10.1.2.3:8088", true, true, false, true},
		{"10.1.2.3:8088", true, false, true, true},
	} {
		err := CheckListen(c.listen, c.tls, c.certs, c.tokens)
		assert.Check(t, is.Equal(err == nil, c.ok), "%+v: %v", c, err)
	}
}

// The ledger is opened so that it cannot be written.
func TestReadOnly(t *testing.T) {
	w := sqliteWorld(t)
	l, err := ledger.OpenReadOnly(w.db)
	assert.NilError(t, err)
	defer l.Close()
	_, err = l.Claim(context.Background(), ledger.Request{GUID: testkit.GUID(), TxCode: "X", Frame: []byte("x"), Body: []byte("x")})
	assert.Check(t, is.ErrorIs(err, ledger.ErrReadOnly))
}

// Every page renders.
func TestPagesRender(t *testing.T) {
	w := sqliteWorld(t)
	ts, _ := serve(t, w.db, nil)
	for _, p := range []string{"/", "/needs", "/needs?need=out&tx=BKTR0001&state=FAILED&age=0", "/search", "/search?q=" + w.out[:20], "/guid/" + w.out, "/login", "/assets/style.css", "/assets/console.js", "/api/overview"} {
		status, body, _ := get(t, ts.URL+p)
		assert.Check(t, is.Equal(status, 200), "%s: %s", p, body)
	}
}

// Client certificates: a verified one is its subject in the access log;
// none is a 401, logged.
func TestClientCertificates(t *testing.T) {
	w := sqliteWorld(t)
	dir := t.TempDir()
	ca := testkit.NewCA(t, "ops CA")
	cert, key := ca.Server(t, "console").WriteFiles(t, dir, "console")
	tlsCfg, err := TLSConfig(tlsconf.ServerFiles{Cert: cert, Key: key, ClientCA: ca.WriteCA(t, dir, "ca")})
	assert.NilError(t, err)

	l, err := ledger.OpenReadOnly(w.db)
	assert.NilError(t, err)
	defer l.Close()
	logs := &testkit.SyncBuffer{}
	s, err := New(Config{Ledger: l, ClientCerts: true, Log: slog.New(slog.NewTextHandler(logs, nil))})
	assert.NilError(t, err)
	defer s.Close()
	ts := httptest.NewUnstartedServer(s)
	ts.TLS = tlsCfg
	ts.StartTLS()
	defer ts.Close()

	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: certs}}}
	}
	resp, err := client().Get(ts.URL + "/guid/" + w.settled)
	assert.NilError(t, err)
	resp.Body.Close()
	assert.Check(t, is.Equal(resp.StatusCode, 401))
	assert.Check(t, is.Contains(logs.String(), `request refused" status=401`))

	resp, err = client(ca.Client(t, "alice").TLS).Get(ts.URL + "/guid/" + w.settled)
	assert.NilError(t, err)
	resp.Body.Close()
	assert.Check(t, is.Equal(resp.StatusCode, 200))
	assert.Check(t, is.Contains(resp.Header.Get("Strict-Transport-Security"), "max-age="))
	assert.Check(t, is.Regexp(`guid viewed" guid=`+w.settled+` who="cert CN=alice`, logs.String()))
}

// A purged GUID's page is its history, the purge last.
func TestPurgedGUID(t *testing.T) {
	db := filepath.Join(t.TempDir(), "relay.db")
	l, err := ledger.Open(db, ledger.WithActor(ledger.NewActor("purge")))
	assert.NilError(t, err)
	ctx := context.Background()
	guid := testkit.GUID()
	frame := testkit.Transfer(t, guid, nil)
	c, err := l.Claim(ctx, ledger.Request{GUID: guid, TxCode: testkit.TransferTx().Code, Frame: frame, Body: frame[generated.HeaderLen:]})
	assert.NilError(t, err)
	assert.NilError(t, l.Finish(ctx, guid, c.Attempts, ledger.Outcome{State: ledger.StateDone, RspCode: string(generated.RspHTTP200), Response: []byte("stand-in"), Why: ledger.Why{Reason: "core answered HTTP 200"}}))
	testkit.OpenRaw(t, db, false).SetUpdatedAt(guid, time.Now().Add(-48*time.Hour))
	n, err := l.PurgeDone(ctx, 24*time.Hour, false, "purged after 1 day")
	assert.NilError(t, err)
	assert.Equal(t, n, int64(1))
	assert.NilError(t, l.Close())

	ts, _ := serve(t, db, nil)
	status, body, _ := get(t, ts.URL+"/guid/"+guid)
	assert.Equal(t, status, 200, body)
	assert.Check(t, is.Contains(body, `id="purged"`))
	assert.Check(t, is.Contains(body, `<span class="after">none</span>`), "the purge is the last change")
	assert.Check(t, is.Contains(body, "purged after 1 day"))
	_, body, _ = get(t, ts.URL+"/search?q="+guid[:30])
	assert.Check(t, is.Contains(body, "purged: history only"))
}
