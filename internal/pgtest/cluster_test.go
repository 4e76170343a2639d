package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gotest.tools/v3/assert"
)

func TestMain(m *testing.M) { Main(m) }

func query[T any](t *testing.T, url, q string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	assert.NilError(t, err)
	defer c.Close(ctx)
	var v T
	assert.NilError(t, c.QueryRow(ctx, q).Scan(&v))
	return v
}

// The server's clock is shifted; the test process's is not.
func TestFakeClock(t *testing.T) {
	s := NewServer(t, Options{Env: FakeClock(t, -10*time.Minute)})
	now := query[time.Time](t, s.AdminURL(), `SELECT now()`)
	behind := time.Since(now)
	assert.Assert(t, behind > 9*time.Minute && behind < 11*time.Minute, "the server's clock is %s behind", behind)
}

// A synchronous pair: a commit on the primary is on the standby; after
// the failover the standby takes writes and still has it.
func TestPairFailover(t *testing.T) {
	p := NewPair(t, true, Options{})
	assert.Equal(t, query[string](t, p.Primary.AdminURL(), `SELECT sync_state FROM pg_stat_replication`), "sync")
	Exec(t, p.URL(), `CREATE TABLE kept(v int)`)
	Exec(t, p.URL(), `INSERT INTO kept VALUES (1)`)
	p.Failover(t)
	assert.Equal(t, query[bool](t, p.Standby.AdminURL(), `SELECT pg_is_in_recovery()`), false)
	Exec(t, p.URL(), `INSERT INTO kept VALUES (2)`)
	assert.Equal(t, query[int64](t, p.URL(), `SELECT count(*) FROM kept`), int64(2))
}
