package ledger

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// TryExclusive takes, without waiting, the lock called name that every
// process sharing this ledger contends for, and returns the function that
// releases it; ok is false when another holder has it. The relays use it
// so that one of them, not each, runs a settling round (SPEC §5.11): each
// row is then looked up once per round. A holder that dies loses the lock
// with its process.
//
// SQLite is shared only by processes on one host, so there the lock is an
// advisory file lock (flock) on a file beside the ledger, named after it
// and name. The lock file is never removed: removing it would let two
// holders lock two different files. A PostgreSQL ledger is shared across
// hosts: there the lock is a session advisory lock, held on a connection
// of its own until release (or until the holder's session ends).
func (l *Ledger) TryExclusive(ctx context.Context, name string) (release func(), ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	return l.st.tryExclusive(ctx, name)
}

func (s *sqliteStore) tryExclusive(_ context.Context, name string) (release func(), ok bool, err error) {
	path := s.path + "." + name + ".lock"
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("ledger: lock %s: %w", name, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if err == syscall.EWOULDBLOCK {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("ledger: lock %s: %w", name, err)
	}
	return func() { f.Close() }, true, nil // closing the file releases the lock
}

// tryExclusive takes a session advisory lock named after name, on a
// connection of its own (outside the pool) held until release: the lock
// lasts as long as that session, so a holder that dies (or loses its
// connection) loses it. Close releases the locks still held.
func (s *pgStore) tryExclusive(ctx context.Context, name string) (release func(), ok bool, err error) {
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return nil, false, ErrClosed
	}
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
	if err != nil {
		return nil, false, fmt.Errorf("ledger: lock %s: %w", name, err)
	}
	key := "lhrelay:" + name
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext($1))`, key).Scan(&ok); err != nil || !ok {
		conn.Close(context.Background())
		if err != nil {
			return nil, false, fmt.Errorf("ledger: lock %s: %w", name, err)
		}
		return nil, false, nil
	}
	s.lmu.Lock()
	s.locks[conn] = key
	s.lmu.Unlock()
	return func() { s.unlock(conn) }, true, nil
}

// unlock releases a lock before ending its session: the end of a session
// releases its locks too, but only once the server has noticed it, so the
// next holder could still find it taken for a moment.
func (s *pgStore) unlock(conn *pgx.Conn) {
	s.lmu.Lock()
	key, held := s.locks[conn]
	delete(s.locks, conn)
	s.lmu.Unlock()
	if held {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtext($1))`, key)
		conn.Close(ctx)
	}
}
