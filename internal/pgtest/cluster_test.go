package pgtest

import (
	"context"
	"os"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

func TestMain(m *testing.M) { Main(m) }

func query[T any](t *testing.T, url, q string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Connect(ctx, url)
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

// A program's pair (no testing.TB): the same failover, and Cleanups
// removes both servers.
func TestProgramPair(t *testing.T) {
	ownBin(t) // skips (or fails under LHRELAY_REQUIRE_POSTGRES) as NewPair does
	var c Cleanups
	p, err := StartPair(&c, true, Options{})
	assert.NilError(t, err)
	t.Cleanup(c.Run) // on a failed assertion too; Run runs once
	Exec(t, p.URL(), `CREATE TABLE kept(v int)`)
	Exec(t, p.URL(), `INSERT INTO kept VALUES (1)`)
	assert.NilError(t, p.KillPrimaryAndPromote())
	Exec(t, p.URL(), `INSERT INTO kept VALUES (2)`)
	assert.Equal(t, query[int64](t, p.URL(), `SELECT count(*) FROM kept`), int64(2))
	dir := p.Standby.s.dir
	c.Run()
	_, err = os.Stat(dir)
	assert.Assert(t, os.IsNotExist(err), "the standby's files are still there: %v", err)
}

// A program's server with its clock shifted.
func TestProgramClock(t *testing.T) {
	env, err := ClockEnv(10 * time.Minute)
	if err != nil {
		t.Skip(err)
	}
	s, err := StartStandaloneWith(Options{Env: env})
	assert.NilError(t, err)
	defer s.Close()
	ahead := -time.Since(query[time.Time](t, s.s.base, `SELECT now()`))
	assert.Assert(t, ahead > 9*time.Minute && ahead < 11*time.Minute, "the server's clock is %s ahead", ahead)
}
