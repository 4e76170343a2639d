package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Replication is what the database says about the copies of its commits
// (SPEC 6a). A commit is durable once it survives the loss of the primary:
// a failover to a standby that was streaming asynchronously forgets the
// claims it had not received yet, and every channel retry of those GUIDs
// is then posted again.
type Replication struct {
	// Standbys is how many standbys stream from the primary: the WAL
	// senders of pg_stat_replication that feed a server a failover could
	// promote (standbySender); always 0 for SQLite.
	Standbys int
	// SyncStandbys is how many of them are synchronous now (sync_state
	// sync or quorum).
	SyncStandbys int
	// SyncSenders is how many WAL senders of any kind are synchronous
	// now: the standbys among them, and any other receiver named in
	// synchronous_standby_names (pg_receivewal --synchronous, a logical
	// subscriber). A commit waits for these, whatever they are.
	SyncSenders int
	// SyncKnown: the role may read the standbys' sync_state (superuser
	// or pg_monitor); without it SyncStandbys and SyncSenders are 0 and
	// mean nothing.
	SyncKnown bool
	// SyncNames is synchronous_standby_names ("" for none).
	SyncNames string
}

// Async reports a primary that streams to standbys while no standby is
// synchronous by configuration (synchronous_standby_names empty): a
// failover would lose acknowledged claims. The relay refuses to start on
// it unless told otherwise (--allow-async-replication).
func (r Replication) Async() bool { return r.Standbys > 0 && strings.TrimSpace(r.SyncNames) == "" }

// SyncLost reports a primary configured for synchronous standbys none of
// which is attached and synchronous: commits wait for one (and a wait cut
// short leaves a claim unconfirmed, ErrUnconfirmed).
func (r Replication) SyncLost() bool {
	return strings.TrimSpace(r.SyncNames) != "" && r.SyncKnown && r.SyncSenders == 0
}

// Problem says in one line what is unsafe about r, or "" when nothing is.
func (r Replication) Problem() string {
	switch {
	case r.Async():
		return fmt.Sprintf("the primary streams to %d standby(s) asynchronously (synchronous_standby_names is empty): a failover would forget acknowledged claims and retries would be posted twice", r.Standbys)
	case r.SyncLost():
		return fmt.Sprintf("synchronous_standby_names is %q but no synchronous standby is attached: commits wait for one", r.SyncNames)
	}
	return ""
}

// Replication reads the primary's replication state (PostgreSQL; a SQLite
// ledger has no standbys and reports the zero Replication).
func (l *Ledger) Replication(ctx context.Context) (Replication, error) {
	if l.isClosed.Load() {
		return Replication{}, fmt.Errorf("ledger: replication: %w", ErrClosed)
	}
	r, err := l.st.replication(ctx)
	if err != nil {
		l.countError(opRead, err)
		return Replication{}, fmt.Errorf("ledger: replication: %w", err)
	}
	return r, nil
}

func (s *sqliteStore) replication(context.Context) (Replication, error) { return Replication{}, nil }

// standbySender is the SQL condition, over pg_stat_replication r and
// pg_stat_activity a of the same pid, that a WAL sender feeds a standby.
// The primary also streams to receivers that are not standbys, and
// counting them would refuse what SPEC 6a allows:
//
//   - A logical replication connection (a subscriber, pg_recvlogical) is
//     connected to a database; a physical one, a standby's included, is
//     not (its walreceiver asks for replication=true). The database is
//     known from the connection's start and shown to every role, while
//     the logical slot such a sender holds is released and taken again
//     as a subscription starts and syncs its tables.
//   - A base backup's sender is in state backup.
//   - pg_receivewal and pg_basebackup's WAL stream receive WAL and replay
//     none: they report a write position and never a replay position. A
//     standby reports both from its first status message on.
//
// A sender that has reported no position yet is counted: a standby's
// first status message comes a moment after its sender appears (it
// streams before it has answered), and the primary shows no positions or
// state to a role without pg_read_all_stats (pg_monitor). So an archiver
// or a backup counts for a moment as it connects, and always for such a
// role, while a standby is never missed.
const standbySender = `a.datid IS NULL AND r.state IS DISTINCT FROM 'backup' AND NOT (r.write_lsn IS NOT NULL AND r.replay_lsn IS NULL)`

func (s *pgStore) replication(ctx context.Context) (Replication, error) {
	var r Replication
	err := s.pool.QueryRow(ctx, `SELECT current_setting('synchronous_standby_names'),
  count(*) FILTER (WHERE standby), count(*) FILTER (WHERE standby AND sync), count(*) FILTER (WHERE sync),
  count(*) = 0 OR count(sync) > 0
FROM (SELECT `+standbySender+` AS standby, r.sync_state IN ('sync', 'quorum') AS sync
  FROM pg_stat_replication r LEFT JOIN pg_stat_activity a ON a.pid = r.pid) w`).Scan(&r.SyncNames, &r.Standbys, &r.SyncStandbys, &r.SyncSenders, &r.SyncKnown)
	return r, err
}

// ErrAsyncReplication: the primary streams to standbys asynchronously
// (Replication.Async) and the caller did not allow it.
var ErrAsyncReplication = errors.New("asynchronous replication refused")

// CheckReplication is the check every process that writes the ledger makes
// at start (SPEC 6a): a primary with standbys attached while
// synchronous_standby_names is empty is refused, naming the setting and the
// flag that accepts it, unless allowAsync.
func (l *Ledger) CheckReplication(ctx context.Context, allowAsync bool) error {
	r, err := l.Replication(ctx)
	if err != nil {
		return err
	}
	if r.Async() && !allowAsync {
		return fmt.Errorf("%w: %s; set synchronous_standby_names on the primary, or start with --allow-async-replication to accept the risk", ErrAsyncReplication, r.Problem())
	}
	return nil
}
