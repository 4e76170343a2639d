package ledger

import (
	"context"
	"fmt"
	"os"
	"syscall"
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
