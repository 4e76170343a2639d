package console

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

// TestPageTimes times every page on a ledger of LHRELAY_CONSOLE_BENCH_ROWS
// rows (default 1,000,000) with three history entries each, on both
// stores, and prints p50 and p99 per page. It builds that ledger first
// (a minute or two), so it runs only when LHRELAY_CONSOLE_BENCH=1:
//
//	LHRELAY_CONSOLE_BENCH=1 LHRELAY_REQUIRE_POSTGRES=1 go test -run TestPageTimes -v -timeout 30m ./internal/console
//
// The entries are not hash-chained (their hashes are empty): the timings
// do not depend on it, and the console's audit then stops at the first
// entry instead of reading 3,000,000 meanwhile.
func TestPageTimes(t *testing.T) {
	if os.Getenv("LHRELAY_CONSOLE_BENCH") != "1" {
		t.Skip("builds a ledger of a million rows: set LHRELAY_CONSOLE_BENCH=1")
	}
	rows := 1_000_000
	if s := os.Getenv("LHRELAY_CONSOLE_BENCH_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		assert.NilError(t, err)
		rows = n
	}
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			var db string
			if store == "sqlite" {
				db = filepath.Join(t.TempDir(), "relay.db")
				if keep := os.Getenv("LHRELAY_CONSOLE_BENCH_DB"); keep != "" {
					db = keep // kept, for EXPLAIN QUERY PLAN
				}
			} else {
				db = pgtest.URL(t)
			}
			l, err := ledger.Open(db) // the schema, as a relay makes it
			assert.NilError(t, err)
			assert.NilError(t, l.Close())
			start := time.Now()
			sample := fill(t, db, rows)
			t.Logf("%s: %d rows and %d history entries written in %v", store, rows, 3*rows, time.Since(start).Round(time.Second))
			timePages(t, db, sample)
		})
	}
}

// synthetic is what fill wrote, for the pages to ask about.
type synthetic struct {
	guids   []string // a sample of the GUIDs
	unknown string   // a cursor deep into the UNKNOWN rows
}

// fill writes n rows (97% DONE, 1% each UNKNOWN, FAILED/E902 and SENT),
// updated over the last 30 days, with three entries each, in one
// transaction (SQLite) or COPY (PostgreSQL).
func fill(t *testing.T, db string, n int) synthetic {
	t.Helper()
	req := testkit.Transfer(t, testkit.GUID(), map[string]string{"memo": "bulk"})
	h := generated.RawHeader(req)
	rsp, err := wire.AppendResponse(nil, &h, generated.RspHTTP200, &generated.BKTR0001Response{CoreTxid: "T000000000000001", Balance: 1, PostedAt: "20261129103001"}, time.Now())
	assert.NilError(t, err)
	now := time.Now().UTC().Truncate(time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	type row struct {
		guid            string
		state, code     string
		attempts        int
		at              time.Time
		key             int64
		request, answer []byte
	}
	chains := []string{"relay-a", "relay-b", "relay-c", "resolve-d"}
	seqs := make([]int64, len(chains))
	var s synthetic
	gen := func(i int) row {
		guid := fmt.Sprintf("%016x%016x", rng.Uint64(), uint64(i))
		r := row{guid: guid, state: "DONE", code: "0000", attempts: 1, at: now.Add(-time.Duration(rng.Int64N(int64(30 * 24 * time.Hour)))).Truncate(time.Second), key: int64(i + 1)}
		switch i % 100 {
		case 1:
			r.state, r.code = "UNKNOWN", "E901"
		case 2:
			r.state, r.code, r.attempts = "FAILED", "E902", 1+i%4
		case 3:
			r.state, r.code = "SENT", ""
		}
		r.request = append([]byte(nil), req...)
		copy(r.request[12:44], guid)
		if r.state != "SENT" {
			r.answer = append([]byte(nil), rsp...)
			copy(r.answer[12:44], guid)
		}
		if i%(n/50+1) == 0 {
			s.guids = append(s.guids, guid)
		}
		return r
	}
	type entry struct {
		chain                     string
		seq                       int64
		before, rspB, after, rspA string
		at                        time.Time
		attempts                  int
		command, reason           string
		row                       *row
	}
	entries := func(r *row) [3]entry {
		c := rng.IntN(len(chains))
		mid, midCode := "UNKNOWN", "E901"
		if r.state == "SENT" {
			mid, midCode = "FAILED", "E902"
		}
		last, lastCode := r.state, r.code
		var es [3]entry
		for k, e := range []struct{ b, rb, a, ra, why string }{
			{"", "", "SENT", "", "claimed: new GUID"},
			{"SENT", "", mid, midCode, "no answer from the core"},
			{mid, midCode, last, lastCode, "lookup 200: posted"},
		} {
			cc := c
			if k == 2 {
				cc = (c + 1) % len(chains)
			}
			seqs[cc]++
			es[k] = entry{chains[cc], seqs[cc], e.b, e.rb, e.a, e.ra, r.at.Add(time.Duration(k-2) * time.Second), r.attempts, "relay", e.why, r}
		}
		return es
	}
	if ledger.IsURL(db) {
		ctx := context.Background()
		c, err := pgx.Connect(ctx, db)
		assert.NilError(t, err)
		defer c.Close(ctx)
		var rs []row
		for i := range n {
			rs = append(rs, gen(i))
		}
		_, err = c.CopyFrom(ctx, pgx.Identifier{"tx"}, []string{"guid", "tx_code", "state", "rsp_code", "request", "response", "attempts", "updated_at", "hist_key"},
			pgx.CopyFromSlice(len(rs), func(i int) ([]any, error) {
				r := &rs[i]
				var code any = r.code
				if r.code == "" {
					code = nil
				}
				return []any{r.guid, "BKTR0001", r.state, code, r.request, r.answer, r.attempts, r.at, r.key}, nil
			}))
		assert.NilError(t, err)
		_, err = c.CopyFrom(ctx, pgx.Identifier{"history"}, []string{"chain", "seq", "prev_hash", "hash", "guid", "at", "state_before", "rsp_before", "state_after", "rsp_after", "attempts", "command", "host", "pid", "reason", "http_status", "took_us", "hist_key"},
			pgx.CopyFromFunc(func() func() ([]any, error) {
				i, k := 0, 0
				var es [3]entry
				return func() ([]any, error) {
					if i >= len(rs) {
						return nil, nil
					}
					if k == 0 {
						es = entries(&rs[i])
					}
					e := es[k]
					if k++; k == 3 {
						k, i = 0, i+1
					}
					return []any{e.chain, e.seq, "", "", e.row.guid, e.at, e.before, e.rspB, e.after, e.rspA, e.attempts, e.command, "bench", 1, e.reason, 200, 1000, e.row.key}, nil
				}
			}()))
		assert.NilError(t, err)
		for i, ch := range chains {
			_, err = c.Exec(ctx, `INSERT INTO history_chain(chain, command, host, pid, started_at, head_seq, head_hash) VALUES ($1, 'relay', 'bench', 1, now(), $2, '')`, ch, seqs[i])
			assert.NilError(t, err)
		}
		_, err = c.Exec(ctx, `ANALYZE`)
		assert.NilError(t, err)
	} else {
		d, err := sql.Open("sqlite3", "file:"+db+"?mode=rw&_journal_mode=WAL&_busy_timeout=10000")
		assert.NilError(t, err)
		defer d.Close()
		tx, err := d.Begin()
		assert.NilError(t, err)
		insTx, err := tx.Prepare(`INSERT INTO tx(guid, tx_code, state, rsp_code, request, response, attempts, updated_at, hist_key) VALUES (?, 'BKTR0001', ?, ?, ?, ?, ?, ?, ?)`)
		assert.NilError(t, err)
		insH, err := tx.Prepare(`INSERT INTO history(chain, seq, prev_hash, hash, guid, at, state_before, rsp_before, state_after, rsp_after, attempts, command, host, pid, reason, http_status, took_us, hist_key)
VALUES (?, ?, '', '', ?, ?, ?, ?, ?, ?, ?, ?, 'bench', 1, ?, 200, 1000, ?)`)
		assert.NilError(t, err)
		for i := range n {
			r := gen(i)
			var code any = r.code
			if r.code == "" {
				code = nil
			}
			_, err := insTx.Exec(r.guid, r.state, code, r.request, r.answer, r.attempts, r.at.Format("2006-01-02 15:04:05"), r.key)
			assert.NilError(t, err)
			for _, e := range entries(&r) {
				_, err := insH.Exec(e.chain, e.seq, r.guid, e.at.Format("2006-01-02 15:04:05.000000"), e.before, e.rspB, e.after, e.rspA, e.attempts, e.command, e.reason, r.key)
				assert.NilError(t, err)
			}
		}
		for i, ch := range chains {
			_, err = tx.Exec(`INSERT INTO history_chain(chain, command, host, pid, started_at, head_seq, head_hash) VALUES (?, 'relay', 'bench', 1, datetime('now'), ?, '')`, ch, seqs[i])
			assert.NilError(t, err)
		}
		assert.NilError(t, tx.Commit())
		_, err = d.Exec(`ANALYZE`)
		assert.NilError(t, err)
	}
	return s
}

// timePages asks every page many times through HTTP on the loopback and
// prints p50 and p99 of each.
func timePages(t *testing.T, db string, s synthetic) {
	t.Helper()
	ts, _ := serve(t, db, func(c *Config) { c.Refresh = 5 * time.Second; c.AuditEvery = 24 * time.Hour })
	// The first overview read: the page waits for it once, at start.
	start := time.Now()
	_, body, _ := get(t, ts.URL+"/api/overview")
	t.Logf("first overview read (Stats and counts, then kept, read again in the background): %v", time.Since(start).Round(time.Millisecond))
	// Meanwhile the audit that runs at start reads the history: pages
	// share the database with it.
	var during []time.Duration
	for i := 0; i < 100 && strings.Contains(body, `"ran":false`); i++ {
		start := time.Now()
		get(t, ts.URL+"/needs")
		during = append(during, time.Since(start))
		_, body, _ = get(t, ts.URL+"/api/overview")
	}
	if len(during) > 0 {
		slices.Sort(during)
		t.Logf("%-40s p50 %6.1f ms  p99 %6.1f ms  max %6.1f ms  (%d runs)", "needs, while the start audit runs", ms(during[len(during)/2]), ms(during[len(during)*99/100]), ms(during[len(during)-1]), len(during))
	}
	for strings.Contains(body, `"ran":false`) {
		time.Sleep(100 * time.Millisecond) // a benchmark's wait, not a test's synchronisation
		_, body, _ = get(t, ts.URL+"/api/overview")
	}
	t.Logf("start audit done after %v; the rest is measured without it", time.Since(start).Round(time.Millisecond))

	// A cursor deep into the UNKNOWN rows: the 5th page.
	next := "/needs?need=unknown"
	for range 5 {
		_, body, _ = get(t, ts.URL+next)
		i := indexOf(body, `id="next" href="`)
		if i < 0 {
			break
		}
		rest := body[i+len(`id="next" href="`):]
		next = unescapeAmp(rest[:indexOf(rest, `"`)])
	}
	pages := []struct{ name, path func(i int) string }{}
	add := func(name string, path func(i int) string) {
		pages = append(pages, struct{ name, path func(i int) string }{func(int) string { return name }, path})
	}
	add("overview /", func(int) string { return "/" })
	add("/api/overview", func(int) string { return "/api/overview" })
	add("needs (all reasons, first page)", func(int) string { return "/needs" })
	add("needs?need=unknown, 6th page (keyset)", func(int) string { return next })
	add("needs?need=out&tx=BKTR0001&age=3600", func(int) string { return "/needs?need=out&tx=BKTR0001&age=3600" })
	add("needs?state=SENT&age=86400", func(int) string { return "/needs?state=SENT&age=86400" })
	add("guid page", func(i int) string { return "/guid/" + s.guids[i%len(s.guids)] })
	add("search by 6-digit prefix", func(i int) string { return "/search?q=" + s.guids[i%len(s.guids)][:6] })
	const runs = 200
	for _, p := range pages {
		ds := make([]time.Duration, 0, runs)
		for i := range runs {
			start := time.Now()
			resp, err := http.Get(ts.URL + p.path(i))
			assert.NilError(t, err)
			resp.Body.Close()
			ds = append(ds, time.Since(start))
			assert.Equal(t, resp.StatusCode, 200, p.path(i))
		}
		slices.Sort(ds)
		t.Logf("%-40s p50 %6.1f ms  p99 %6.1f ms  max %6.1f ms", p.name(0), ms(ds[len(ds)/2]), ms(ds[len(ds)*99/100]), ms(ds[len(ds)-1]))
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func unescapeAmp(s string) string {
	out := ""
	for i := 0; i < len(s); i++ {
		if i+5 <= len(s) && s[i:i+5] == "&amp;" {
			out += "&"
			i += 4
			continue
		}
		out += string(s[i])
	}
	return out
}
