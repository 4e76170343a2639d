package ledger

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/pgtest"
	"lhrelay/internal/testkit"
)

// The PostgreSQL store's own rules: its session settings, its schema, what
// it refuses, how it rides out a database restart.

func TestPostgresSessionSettings(t *testing.T) {
	l := openLedger(t, pgtest.URL(t))
	ctx := context.Background()
	// Every pooled connection has them: take several at once.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sc, lt, st, iso, tz string
			err := l.st.read().queryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('lock_timeout'),
current_setting('statement_timeout'), current_setting('transaction_isolation'), current_setting('TimeZone')`).Scan(&sc, &lt, &st, &iso, &tz)
			assert.Check(t, err)
			assert.Check(t, is.Equal(sc, "on"))
			assert.Check(t, is.Equal(lt, "5s"))
			assert.Check(t, is.Equal(st, "10s"))
			assert.Check(t, is.Equal(iso, "read committed"))
			assert.Check(t, is.Equal(tz, "UTC"))
		}()
	}
	wg.Wait()
}

func TestPostgresRefusesWeakSynchronousCommit(t *testing.T) {
	for _, u := range []string{
		pgtest.URL(t) + "&synchronous_commit=off",
		pgtest.URL(t) + "&synchronous_commit=local",
	} {
		_, err := Open(u)
		assert.ErrorContains(t, err, "synchronous_commit", u)
	}
	for u, want := range map[string]string{
		pgtest.URL(t) + "&synchronous_commit=remote_apply": "remote_apply",
		// The relay's own setting wins over one slipped into options;
		// were it not so, checkSession would refuse the connection.
		pgtest.URL(t) + "&options=-c%20synchronous_commit%3Doff": "on",
	} {
		l, err := Open(u)
		assert.NilError(t, err)
		var sc string
		assert.NilError(t, l.st.read().queryRow(context.Background(), `SHOW synchronous_commit`).Scan(&sc))
		assert.Equal(t, sc, want)
		assert.NilError(t, l.Close())
	}
}

// Relays starting at the same instant on an empty database: the advisory
// lock serialises the schema, every Open succeeds, one version row.
func TestPostgresSchemaConcurrentOpens(t *testing.T) {
	u := pgtest.URL(t)
	const n = 8
	errs := make(chan error, n)
	start := make(chan struct{})
	for range n {
		go func() {
			<-start
			l, err := Open(u)
			if err == nil {
				err = l.Close()
			}
			errs <- err
		}()
	}
	close(start)
	for range n {
		assert.NilError(t, <-errs)
	}
	l := openLedger(t, u)
	var versions, maxVersion int
	assert.NilError(t, raw(t, l).QueryRow(`SELECT COUNT(*), MAX(version) FROM schema_version`, nil, &versions, &maxVersion))
	assert.Equal(t, versions, SchemaVersion) // one row per version
	assert.Equal(t, maxVersion, SchemaVersion)
	// Applied once more by hand: nothing changes.
	raw(t, l).Exec(schemaPostgresSQL)
	assert.NilError(t, l.Ping(context.Background()))
}

func TestPostgresOpenExistingRefusesWhatIsNotALedger(t *testing.T) {
	t.Run("no tx table", func(t *testing.T) {
		u := pgtest.URL(t)
		_, err := OpenExisting(u)
		assert.Check(t, errors.Is(err, ErrNotLedger))
		assert.ErrorContains(t, err, "no tx table")
	})
	t.Run("tx without the columns", func(t *testing.T) {
		u := pgtest.URL(t)
		l := openLedger(t, u) // a ledger…
		db := raw(t, l)
		db.Exec(`DROP TABLE tx`)
		db.Exec(`CREATE TABLE tx(guid text PRIMARY KEY, state text)`) // …replaced by something else
		for _, open := range []func(string, ...Option) (*Ledger, error){Open, OpenExisting} {
			_, err := open(u)
			assert.Check(t, errors.Is(err, ErrNotLedger))
			assert.Check(t, is.ErrorContains(err, "lacks columns tx_code, rsp_code, request, response, attempts, updated_at"))
		}
	})
	t.Run("newer schema version", func(t *testing.T) {
		u := pgtest.URL(t)
		l := openLedger(t, u)
		raw(t, l).Exec(`INSERT INTO schema_version(version) VALUES (?)`, SchemaVersion+1)
		_, err := OpenExisting(u)
		assert.Check(t, errors.Is(err, ErrNotLedger))
		assert.ErrorContains(t, err, "newer")
	})
	t.Run("unreachable", func(t *testing.T) {
		_, err := OpenExisting("postgres://lhrelay:secret@127.0.0.1:1/ledger?connect_timeout=2")
		assert.ErrorContains(t, err, "ledger: open postgres://lhrelay@127.0.0.1:1/ledger")
		assert.Check(t, !errors.Is(err, ErrNotLedger))
		assert.Check(t, !strings.Contains(err.Error(), "secret"), "the password leaked: %v", err)
	})
}

// TestPasswordNeverShown: whatever a password holds, neither the ledger's
// Path (logged at every start) nor an open error shows it, raw or
// percent-encoded, and the user, host and database are still named.
func TestPasswordNeverShown(t *testing.T) {
	base := pgtest.URL(t) // postgres://postgres@127.0.0.1:PORT/postgres?search_path=…
	for _, pw := range []string{"S3cr3t?x", "S3c/r3t", "S3c#r3t", "S3c@r3t", "S3c:r3t", "S3c%r3t", "S3c r3t", "p%2Fss/w?rd#x@y:z w"} {
		for _, form := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw)} {
			t.Run(form, func(t *testing.T) {
				noLeak := func(text string) {
					t.Helper()
					for _, secret := range []string{pw, form, "S3c", "r3t"} {
						assert.Check(t, !strings.Contains(text, secret), "%q shows %q", text, secret)
					}
				}
				// The test server trusts 127.0.0.1 whatever the password:
				// a URL that parses opens.
				u := strings.Replace(base, "postgres@", "postgres:"+form+"@", 1)
				if l, err := Open(u); err == nil {
					noLeak(l.Path())
					assert.Check(t, strings.Contains(l.Path(), "postgres@127.0.0.1:"), l.Path())
					assert.NilError(t, l.Close())
				} else {
					noLeak(err.Error())
				}
				// Unreachable: the error names where, not the password.
				_, err := OpenExisting("postgresql://lhrelay:" + form + "@127.0.0.1:1/ledger?connect_timeout=1")
				assert.Assert(t, err != nil)
				noLeak(err.Error())
				// A password parameter is dropped too.
				_, err = OpenExisting("postgres://127.0.0.1:1/ledger?user=lhrelay&password=" + url.QueryEscape(pw) + "&connect_timeout=1")
				assert.Assert(t, err != nil)
				noLeak(err.Error())
				assert.Check(t, strings.Contains(err.Error(), "postgres://lhrelay@127.0.0.1:1/ledger?"), err.Error())
			})
		}
	}
}

// TestDisplayURL: what is shown is built from the parsed configuration.
func TestDisplayURL(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:pw@h/db": "postgres://u@h:5432/db?sslmode=verify-full",
		"postgres://u@h:5432,h2:5433/db?target_session_attrs=read-write": "postgres://u@h:5432,h2:5433/db?target_session_attrs=read-write&sslmode=verify-full",
		"postgresql://u:p%40ss@h1,h2/db":                                 "postgresql://u@h1:5432,h2:5432/db?sslmode=verify-full",
		"postgres://h/db?user=u&password=pw&sslmode=require":             "postgres://u@h:5432/db?user=u&sslmode=require",
		"postgres://u:pw@127.0.0.1/db?search_path=x":                     "postgres://u@127.0.0.1:5432/db?search_path=x",
	} {
		u, err := parseURL(in)
		assert.NilError(t, err, in)
		assert.Equal(t, u.shown, want)
	}
	assert.Equal(t, displayUnparsed("postgres://u:a/b?c@h:1/db?password=x"), "postgres://h:1/db")
	_, err := parseURL("postgresql://u:p@ss@h1,h2/db")
	assert.ErrorIs(t, err, errUnparsable)
	// Without a password pgx's own message, which says what is wrong.
	_, err = parseURL("postgres://u@h/db?sslmode=sometimes")
	assert.ErrorContains(t, err, "sslmode is invalid")
}

// TestPostgresRestart: while the database is down, Ping fails (the relay's
// /readyz is 503) and a claim fails without writing anything; once it is
// back, the same Ledger serves again by itself, and every claim that
// reported success is there.
func TestPostgresRestart(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, pgtest.URL(t), WithRetry(0, 0))
	before := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	seed(t, l, before, StateDone, codeOK)

	pgtest.Stop(t)
	stopped := true
	t.Cleanup(func() {
		if stopped {
			pgtest.Start(t)
		}
	})
	assert.Check(t, l.Ping(ctx) != nil, "ping while the database is down")
	down := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	_, err := l.Claim(ctx, down)
	assert.Check(t, err != nil)
	assert.Check(t, l.Errors()[opClaim] >= 1, "claim errors counted: %v", l.Errors())

	pgtest.Start(t)
	stopped = false
	deadline := time.Now().Add(10 * time.Second)
	for l.Ping(ctx) != nil {
		assert.Assert(t, time.Now().Before(deadline), "the ledger did not reconnect")
		time.Sleep(20 * time.Millisecond)
	}
	c, err := l.Claim(ctx, request(txTransfer, before.GUID, sentAt2, bodyA))
	assert.NilError(t, err)
	assert.Equal(t, c.Outcome, Replay)
	// The claim that failed wrote nothing (no connection): it is new now.
	c, err = l.Claim(ctx, down)
	assert.NilError(t, err)
	assert.Equal(t, c.Outcome, Owned)
}

// TestPostgresMultiHostURL: with a primary and a standby listed, and the
// first host down, the ledger connects to the one that accepts writes.
func TestPostgresMultiHostURL(t *testing.T) {
	u := pgtest.URL(t) // postgres://user@127.0.0.1:PORT/db?search_path=…
	scheme, rest, _ := strings.Cut(u, "://")
	user, hostAndRest, _ := strings.Cut(rest, "@")
	dead := "127.0.0.1:1"
	multi := scheme + "://" + user + "@" + dead + "," + hostAndRest + "&target_session_attrs=read-write&connect_timeout=2"
	l := openLedger(t, multi)
	assert.NilError(t, l.Ping(context.Background()))
	r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	seed(t, l, r, StateDone, codeOK)
	assert.Equal(t, l.Path(), multi)
}

// TestPostgresScanUsesTheIndex is TestScanUsesTheIndex for PostgreSQL: with
// one state in the filter each dated page is a range of the (state,
// updated_at, guid) index, read in the page's order (no Sort). Sequential
// and bitmap scans are turned off for the EXPLAIN: on a table this small
// the planner would rightly prefer them; what is checked is that an
// ordered index path exists.
func TestPostgresScanUsesTheIndex(t *testing.T) {
	l := openLedger(t, pgtest.URL(t))
	ctx := context.Background()
	c, err := pgx.Connect(ctx, l.Path())
	assert.NilError(t, err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, `SET enable_seqscan = off; SET enable_bitmapscan = off`)
	assert.NilError(t, err)
	for _, f := range []Filter{
		{States: []State{StateDone}, UpdatedBefore: time.Now()},
		{States: []State{StateUnknown}, UpdatedBefore: time.Now()},
		{States: []State{StateFailed}, RspCode: codeNoConnect, MaxAttempts: 5},
	} {
		where, args, err := f.clauses(postgresDialect)
		assert.NilError(t, err)
		ph := scanPhases[1] // the dated rows
		for _, withCursor := range []bool{false, true} {
			a := args
			if withCursor {
				a = append(a, ph.cursor(postgresDialect, Row{GUID: testkit.GUID(), UpdatedAt: time.Now()})...)
			}
			q := dollarPlaceholders(ph.query(where, withCursor))
			rows, err := c.Query(ctx, "EXPLAIN "+q, append(a, 256)...)
			assert.NilError(t, err)
			plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
			assert.NilError(t, err)
			p := strings.Join(plan, "\n")
			assert.Assert(t, strings.Contains(p, "tx_state_updated_at"), "%s\nplan:\n%s", q, p)
			assert.Assert(t, !strings.Contains(p, "Sort"), "%s\nplan:\n%s", q, p)
		}
	}
}

// TestPostgresFindsARowByItsKey: every statement that works on one row by
// its GUID finds it through tx_pkey, even in the generic plan PostgreSQL
// makes of it on an empty table and keeps for the connection's life (a
// relay that starts on a new ledger). A plan that takes the row's state
// from tx_state_updated_at (state, updated_at, guid) instead scans every
// index entry of that state, dead ones included: the cost of each outcome
// grows with the transfers written until a vacuum.
func TestPostgresFindsARowByItsKey(t *testing.T) {
	ctx := context.Background()
	db := pgtest.URL(t)
	openLedger(t, db)
	c, err := pgx.Connect(ctx, db)
	assert.NilError(t, err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	assert.NilError(t, err)
	for name, q := range map[string]string{
		"claim's existing row":             sqlClaimExisting,
		"re-claim":                         sqlReclaim,
		"re-claim below":                   sqlReclaimBelow,
		"transition":                       sqlTransitionReturning,
		"row before":                       sqlRowBefore,
		"transition of a claim":            sqlTransitionOfClaimReturning,
		"row before, of a claim":           sqlRowBeforeOfClaim,
		"transition of a fresh claim":      sqlTransitionOfFreshClaim,
		"transition of a claim, its token": sqlTransitionOfClaim + ` AND claim_token = ?` + sqlReturnBefore,
		"state and attempts":               sqlStateAttemptsOf,
		"outcome":                          sqlOutcomeOf,
	} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			_, err := c.Exec(ctx, `PREPARE s AS `+dollarPlaceholders(q))
			assert.NilError(t, err)
			defer c.Exec(ctx, `DEALLOCATE s`)
			nulls := strings.TrimSuffix(strings.Repeat("NULL, ", strings.Count(q, "?")), ", ")
			rows, err := c.Query(ctx, `EXPLAIN EXECUTE s(`+nulls+`)`)
			assert.NilError(t, err)
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			assert.NilError(t, err)
			plan := strings.Join(lines, "\n")
			assert.Check(t, is.Contains(plan, "tx_pkey"), plan)
			assert.Check(t, !strings.Contains(plan, "tx_state_updated_at"), plan)
		})
	}
}

// TestHistoryHeadBehindTheDatabase: when the chain's head in the database
// is ahead of the writer's (a COMMIT whose answer was lost, still
// committing when the next transaction read the head), the history
// INSERT finds its places taken. The writer then reads the head afresh
// and runs the operations again: the claim and the outcome land, chained
// after the entry it had not known, instead of every later transaction
// failing the same way.
func TestHistoryHeadBehindTheDatabase(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, pgtest.URL(t))
	first := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	seed(t, l, first, StateDone, codeOK)
	head := l.ChainHead()
	assert.Equal(t, head.Seq, int64(2))

	// The entry a transaction the writer believes lost did commit: its
	// row of history and its head.
	rw := raw(t, l)
	rw.Exec(`INSERT INTO history(`+historyColumns+`) SELECT chain, seq + 1, hash, 'h3', guid, at, state_after, rsp_after, state_after, rsp_after,
attempts, command, host, pid, 'the entry the writer did not hear of', http_status, took_us FROM history WHERE chain = ? AND seq = ?`, head.Chain, head.Seq)
	rw.Exec(`UPDATE history_chain SET head_seq = 3, head_hash = 'h3' WHERE chain = ?`, head.Chain)

	next := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	c, err := l.Claim(ctx, next)
	assert.NilError(t, err)
	assert.Equal(t, c.Outcome, Owned)
	assert.NilError(t, l.Finish(ctx, next.GUID, c.Attempts, Outcome{State: StateDone, RspCode: codeOK, Response: []byte("R"), Why: Why{Reason: "test"}}))
	var entries []Entry
	assert.NilError(t, l.ScanChain(ctx, head.Chain, func(e Entry) error {
		entries = append(entries, e)
		return nil
	}))
	assert.Equal(t, len(entries), 5)
	assert.Equal(t, entries[3].PrevHash, "h3")
	assert.Equal(t, entries[3].GUID, next.GUID)
	assert.Equal(t, l.ChainHead().Seq, int64(5))
}

// TestPostgresScanByFirstClaimUsesTheIndex is TestScanByFirstClaimUsesTheIndex
// for PostgreSQL: each keyed first-claim page is a range of the state's
// partial index, read in the page's order (no Sort).
func TestPostgresScanByFirstClaimUsesTheIndex(t *testing.T) {
	l := openLedger(t, pgtest.URL(t))
	ctx := context.Background()
	c, err := pgx.Connect(ctx, l.Path())
	assert.NilError(t, err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, `SET enable_seqscan = off; SET enable_bitmapscan = off`)
	assert.NilError(t, err)
	for _, tc := range []struct {
		f     Filter
		index string
	}{
		{Filter{States: []State{StateUnknown}, OlderThan: time.Minute, ByFirstClaim: true}, "tx_unknown_first_claim"},
		{Filter{States: []State{StateFailed}, RspCode: codeNoConnect, MaxAttempts: 5, ByFirstClaim: true}, "tx_failed_first_claim"},
	} {
		where, args, err := tc.f.clauses(postgresDialect)
		assert.NilError(t, err)
		ph := firstClaimPhases[1] // the keyed rows
		for _, withCursor := range []bool{false, true} {
			a := args
			if withCursor {
				a = append(a, ph.cursor(postgresDialect, Row{GUID: testkit.GUID(), FirstClaim: 12345})...)
			}
			q := dollarPlaceholders(ph.query(where, withCursor))
			rows, err := c.Query(ctx, "EXPLAIN "+q, append(a, 256)...)
			assert.NilError(t, err)
			plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
			assert.NilError(t, err)
			p := strings.Join(plan, "\n")
			assert.Assert(t, strings.Contains(p, tc.index), "%s\nplan:\n%s", q, p)
			assert.Assert(t, !strings.Contains(p, "Sort"), "%s\nplan:\n%s", q, p)
		}
	}
}
