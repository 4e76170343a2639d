package faultproxy

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gotest.tools/v3/assert"
	"gotest.tools/v3/poll"

	"lhrelay/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// through returns u with its host:port replaced by the proxy's.
func through(t *testing.T, u string, p *Proxy) string {
	t.Helper()
	pu, err := url.Parse(u)
	assert.NilError(t, err)
	return strings.Replace(u, pu.Host, p.Addr(), 1)
}

// proxiedTable starts a proxy in front of a fresh test database and returns
// the database's URL, the proxy, a context for the test and a connection
// through the proxy on which a table t(v int) was created.
func proxiedTable(t *testing.T) (string, *Proxy, context.Context, *pgx.Conn) {
	t.Helper()
	u := pgtest.URL(t)
	pu, err := url.Parse(u)
	assert.NilError(t, err)
	p, err := Start(pu.Host)
	assert.NilError(t, err)
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	c, err := pgx.Connect(ctx, through(t, u, p))
	assert.NilError(t, err)
	_, err = c.Exec(ctx, `CREATE TABLE t(v int)`)
	assert.NilError(t, err)
	return u, p, ctx, c
}

// A COMMIT cut: the server commits, the client hears nothing of it; the
// connections before and after pass unchanged.
func TestCutAfterCommit(t *testing.T) {
	u, p, ctx, c := proxiedTable(t)
	for _, extended := range []bool{false, true} {
		tx, err := c.Begin(ctx)
		assert.NilError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO t VALUES (1)`)
		assert.NilError(t, err)
		p.CutAfterCommits(1)
		if extended {
			_, err = c.Exec(ctx, `COMMIT`, pgx.QueryExecModeExec)
		} else {
			err = tx.Commit(ctx)
		}
		assert.Assert(t, err != nil, "the client heard the COMMIT's answer")
		c.Close(ctx)
		c, err = pgx.Connect(ctx, through(t, u, p))
		assert.NilError(t, err)
	}
	assert.Equal(t, p.CommitsCut(), 2)

	direct, err := pgx.Connect(ctx, u)
	assert.NilError(t, err)
	defer direct.Close(ctx)
	// The server may still be running the last cut COMMIT.
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		var n int
		if err := direct.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil {
			return poll.Error(err)
		}
		if n != 2 {
			return poll.Continue("%d of the 2 cut COMMITs landed", n)
		}
		return poll.Success()
	}, poll.WithTimeout(10*time.Second))
}

// A COMMIT dropped: the client's COMMIT fails as a lost answer would, and
// the server never commits; the next connection passes unchanged.
func TestDropCommit(t *testing.T) {
	u, p, ctx, c := proxiedTable(t)
	tx, err := c.Begin(ctx)
	assert.NilError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO t VALUES (1)`)
	assert.NilError(t, err)
	p.DropCommits(1)
	assert.Assert(t, tx.Commit(ctx) != nil, "the client heard an answer to a dropped COMMIT")
	assert.Equal(t, p.CommitsDropped(), 1)
	c.Close(ctx)

	c, err = pgx.Connect(ctx, through(t, u, p))
	assert.NilError(t, err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, `INSERT INTO t VALUES (2)`)
	assert.NilError(t, err)
	rows, err := c.Query(ctx, `SELECT v FROM t ORDER BY v`)
	assert.NilError(t, err)
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	assert.NilError(t, err)
	assert.DeepEqual(t, vs, []int{2})
}
