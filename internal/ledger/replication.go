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
	// Standbys is how many standbys stream from the primary
	// (pg_stat_replication); always 0 for SQLite.
	Standbys int
	// SyncStandbys is how many of them are synchronous now (sync_state
	// sync or quorum).
	SyncStandbys int
	// SyncKnown: the role may read the standbys' sync_state (superuser
	// or pg_monitor); without it SyncStandbys is 0 and means nothing.
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
	return strings.TrimSpace(r.SyncNames) != "" && r.SyncKnown && r.SyncStandbys == 0
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

func (s *pgStore) replication(ctx context.Context) (Replication, error) {
	var r Replication
	err := s.pool.QueryRow(ctx, `SELECT current_setting('synchronous_standby_names'),
  count(*), count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')), count(*) = 0 OR count(sync_state) > 0
FROM pg_stat_replication`).Scan(&r.SyncNames, &r.Standbys, &r.SyncStandbys, &r.SyncKnown)
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
