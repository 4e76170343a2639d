package replwatch

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/poll"

	"lhrelay/internal/ledger"
	"lhrelay/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func open(t *testing.T, db string) *ledger.Ledger {
	t.Helper()
	l, err := ledger.Open(db)
	assert.NilError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// An asynchronous standby: unready unless allowed; allowed, ready with a
// warning. A SQLite ledger has no standbys and is always fine.
func TestReady(t *testing.T) {
	ctx := context.Background()
	pair := pgtest.NewPair(t, false, pgtest.Options{})
	l := open(t, pair.URL())

	strict := New(l, false, nil)
	assert.NilError(t, strict.Ready(), "nothing checked yet: nothing known to be unsafe")
	strict.Check(ctx)
	r, ok := strict.Status()
	assert.Assert(t, ok)
	assert.Equal(t, r.Standbys, 1)
	assert.Assert(t, r.Async())
	err := strict.Ready()
	assert.Assert(t, errors.Is(err, ErrUnsafe), "got %v", err)
	var w *Warning
	assert.Assert(t, !errors.As(err, &w))
	assert.ErrorContains(t, l.CheckReplication(ctx, false), "synchronous_standby_names")
	assert.NilError(t, l.CheckReplication(ctx, true))

	allowed := New(l, true, nil)
	allowed.Check(ctx)
	err = allowed.Ready()
	assert.Assert(t, errors.As(err, &w), "got %v", err)
	assert.ErrorContains(t, err, "--allow-async-replication")

	// The standby made synchronous while running: safe again.
	pgtest.Exec(t, pair.Primary.AdminURL(), `ALTER SYSTEM SET synchronous_standby_names = '*'`)
	pgtest.Exec(t, pair.Primary.AdminURL(), `SELECT pg_reload_conf()`)
	// The reload reaches the server's processes a moment later.
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		strict.Check(ctx)
		if r, _ = strict.Status(); r.SyncNames != "*" || r.Problem() != "" {
			return poll.Continue("synchronous_standby_names %q, %d synchronous standbys", r.SyncNames, r.SyncStandbys)
		}
		return poll.Success()
	}, poll.WithTimeout(10*time.Second), poll.WithDelay(20*time.Millisecond))
	assert.Assert(t, !r.Async())
	assert.NilError(t, strict.Ready())

	lite := New(open(t, filepath.Join(t.TempDir(), "relay.db")), false, nil)
	lite.Check(ctx)
	assert.NilError(t, lite.Ready())
}
