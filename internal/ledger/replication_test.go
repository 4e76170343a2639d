package ledger

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/poll"

	"lhrelay/internal/faultproxy"
	"lhrelay/internal/pgtest"
)

// walSenders is what the primary at url shows of its WAL senders: the
// number of each kind a test waits for.
type walSenders struct {
	archivers  int // pg_receivewal, having reported a write position
	backups    int // a base backup's data sender
	backupWAL  int // pg_basebackup's -X stream sender, having reported
	logical    int // pg_recvlogical and subscriptions, streaming
	standbys   int // walreceivers, streaming
	unreported int // senders that reported no position yet
}

func readWALSenders(ctx context.Context, url string) (walSenders, error) {
	c, err := pgtest.Connect(ctx, url)
	if err != nil {
		return walSenders{}, err
	}
	defer c.Close(ctx)
	var w walSenders
	err = c.QueryRow(ctx, `SELECT
  count(*) FILTER (WHERE application_name = 'pg_receivewal' AND write_lsn IS NOT NULL),
  count(*) FILTER (WHERE state = 'backup'),
  count(*) FILTER (WHERE application_name = 'pg_basebackup' AND state <> 'backup' AND write_lsn IS NOT NULL),
  count(*) FILTER (WHERE application_name IN ('pg_recvlogical', 'audit_sub') AND state = 'streaming'),
  count(*) FILTER (WHERE application_name = 'walreceiver' AND state = 'streaming'),
  count(*) FILTER (WHERE write_lsn IS NULL AND state <> 'backup')
FROM pg_stat_replication`).Scan(&w.archivers, &w.backups, &w.backupWAL, &w.logical, &w.standbys, &w.unreported)
	return w, err
}

// waitWALSenders waits until the primary at url shows want.
func waitWALSenders(t *testing.T, url string, want walSenders) {
	t.Helper()
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		got, err := readWALSenders(context.Background(), url)
		if err != nil {
			return poll.Error(err)
		}
		if got != want {
			return poll.Continue("WAL senders %+v, waiting for %+v", got, want)
		}
		return poll.Success()
	}, poll.WithTimeout(60*time.Second), poll.WithDelay(50*time.Millisecond))
}

// WAL senders that feed no standby are not standbys (SPEC 6a refuses only
// standbys streaming asynchronously): an archiver (pg_receivewal), a base
// backup under way (pg_basebackup's data sender and its -X stream WAL
// sender), a logical decoding client (pg_recvlogical) and a logical
// replication subscriber. With all of them attached the check every
// writing process makes at start passes; a real standby attached beside
// them is counted, and refused.
func TestReplicationCountsOnlyStandbys(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.NewServer(t, pgtest.Options{Conf: []string{"wal_level=logical", "max_wal_senders=12", "max_replication_slots=12"}})
	admin := srv.AdminURL()

	// A slot that holds WAL from now on: without one pg_receivewal asks
	// for the segment of the position it was told, which the base
	// backup's checkpoint may already have removed.
	pgtest.Exec(t, admin, `SELECT pg_create_physical_replication_slot('archive', true)`)
	srv.StartClient(t, "pg_receivewal", "-D", srv.ScratchDir(t), "--slot", "archive", "--no-sync", "-n")
	// At 32 kB/s the backup lasts well beyond the test.
	srv.StartClient(t, "pg_basebackup", "-D", filepath.Join(srv.ScratchDir(t), "backup"), "-X", "stream", "--no-sync", "-c", "fast", "-r", "32k")
	pgtest.Exec(t, admin, `SELECT pg_create_logical_replication_slot('audit', 'test_decoding')`)
	srv.StartClient(t, "pg_recvlogical", "-d", "postgres", "--slot", "audit", "--start", "-f", "-", "-n")
	pgtest.Exec(t, admin, `CREATE TABLE published(v int PRIMARY KEY)`)
	pgtest.Exec(t, admin, `CREATE PUBLICATION audit_pub FOR TABLE published`)
	sub := pgtest.NewServer(t, pgtest.Options{})
	pgtest.Exec(t, sub.AdminURL(), `CREATE TABLE published(v int PRIMARY KEY)`)
	pgtest.Exec(t, sub.AdminURL(), fmt.Sprintf(`CREATE SUBSCRIPTION audit_sub CONNECTION 'host=127.0.0.1 port=%d user=postgres dbname=postgres' PUBLICATION audit_pub`, srv.Port()))
	waitWALSenders(t, admin, walSenders{archivers: 1, backups: 1, backupWAL: 1, logical: 2})

	l := openLedger(t, srv.URL(t))
	r, err := l.Replication(ctx)
	assert.NilError(t, err)
	assert.Equal(t, r.Standbys, 0, "%+v", r)
	assert.Equal(t, r.SyncStandbys, 0)
	assert.Assert(t, !r.Async())
	assert.NilError(t, l.CheckReplication(ctx, false))

	srv.NewStandby(t)
	waitWALSenders(t, admin, walSenders{archivers: 1, backups: 1, backupWAL: 1, logical: 2, standbys: 1})
	r, err = l.Replication(ctx)
	assert.NilError(t, err)
	assert.Equal(t, r.Standbys, 1, "%+v", r)
	assert.Assert(t, r.Async())
	assert.ErrorIs(t, l.CheckReplication(ctx, false), ErrAsyncReplication)
	assert.ErrorContains(t, l.CheckReplication(ctx, false), "streams to 1 standby(s)")
	assert.NilError(t, l.CheckReplication(ctx, true))
}

// A standby streams before its first status message reaches the primary,
// which shows no positions for it until then: it counts from the start.
// Its replies are dropped on their way (a proxy between standby and
// primary), so the primary streams to it and never hears back.
func TestReplicationCountsAStandbyBeforeItsFirstReply(t *testing.T) {
	ctx := context.Background()
	pair := pgtest.NewPair(t, false, pgtest.Options{StandbyVia: func(primary string) string {
		p, err := faultproxy.Start(primary)
		assert.NilError(t, err)
		t.Cleanup(func() { p.Close() })
		p.MuteCopyData(true)
		return p.Addr()
	}})
	got, err := readWALSenders(ctx, pair.Primary.AdminURL())
	assert.NilError(t, err)
	assert.Equal(t, got, walSenders{standbys: 1, unreported: 1}, "the standby streams and has reported nothing")

	l := openLedger(t, pair.URL())
	r, err := l.Replication(ctx)
	assert.NilError(t, err)
	assert.Equal(t, r.Standbys, 1, "%+v", r)
	assert.ErrorIs(t, l.CheckReplication(ctx, false), ErrAsyncReplication)
}

// A synchronous archiver (pg_receivewal --synchronous, named in
// synchronous_standby_names) confirms commits without being a standby:
// commits do not wait, so nothing is lost (SyncLost), and there is no
// standby to refuse.
func TestReplicationSynchronousArchiver(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.NewServer(t, pgtest.Options{Conf: []string{"synchronous_standby_names=pg_receivewal"}})
	srv.StartClient(t, "pg_receivewal", "-D", srv.ScratchDir(t), "-n", "--synchronous")
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		var n int
		c, err := pgtest.Connect(ctx, srv.AdminURL())
		if err != nil {
			return poll.Error(err)
		}
		defer c.Close(ctx)
		if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE application_name = 'pg_receivewal' AND sync_state = 'sync'`).Scan(&n); err != nil {
			return poll.Error(err)
		}
		if n != 1 {
			return poll.Continue("pg_receivewal not yet the synchronous receiver")
		}
		return poll.Success()
	}, poll.WithTimeout(60*time.Second), poll.WithDelay(50*time.Millisecond))

	l := openLedger(t, srv.URL(t))
	r, err := l.Replication(ctx)
	assert.NilError(t, err)
	assert.DeepEqual(t, r, Replication{SyncSenders: 1, SyncKnown: true, SyncNames: "pg_receivewal"})
	assert.Equal(t, r.Problem(), "")
	assert.NilError(t, l.CheckReplication(ctx, false))
}
