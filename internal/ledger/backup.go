package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mattn/go-sqlite3"
)

// Backup writes a consistent copy of the ledger to the new file to, while
// relays and batch commands keep writing to it. It uses SQLite's online
// backup API, copying every page in one step: one read transaction, so the
// copy holds exactly the rows committed before it began, and in WAL mode the
// writers are not held up meanwhile. The copy is written beside to under a
// temporary name and linked into place only when complete, so to never
// holds half a ledger; an existing to is refused, never overwritten.
// It returns the copy's size in bytes.
//
// It is for a SQLite ledger; a PostgreSQL ledger is backed up with the
// server's own tools (pg_dump, base backups and WAL archiving).
func (l *Ledger) Backup(ctx context.Context, to string) (int64, error) {
	fail := func(err error) (int64, error) { return 0, fmt.Errorf("ledger: backup to %s: %w", to, err) }
	s, ok := l.st.(*sqliteStore)
	if !ok {
		return fail(errors.New("a PostgreSQL ledger is backed up with pg_dump or the server's base backups, not with this command"))
	}
	if _, err := os.Lstat(to); err == nil {
		return fail(errors.New("the file exists; a backup never overwrites one"))
	} else if !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(to), "."+filepath.Base(to)+".partial-*")
	if err != nil {
		return fail(err)
	}
	tmpPath := tmp.Name()
	// A backup holds what the ledger holds: its owner's only, whatever
	// the umask.
	err = tmp.Chmod(0o600)
	tmp.Close()
	if err != nil {
		os.Remove(tmpPath)
		return fail(err)
	}
	defer os.Remove(tmpPath)

	if err := s.copyTo(ctx, tmpPath); err != nil {
		return fail(err)
	}
	if err := os.Link(tmpPath, to); err != nil { // fails if to appeared meanwhile
		return fail(err)
	}
	fi, err := os.Stat(to)
	if err != nil {
		return fail(err)
	}
	return fi.Size(), nil
}

// copyTo runs the backup from a connection of the read pool into the
// SQLite file at path (empty), and closes that file's connection, which
// leaves no -wal or -shm beside it.
func (s *sqliteStore) copyTo(ctx context.Context, path string) error {
	dst, err := sql.Open("sqlite3", "file:"+strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(filepath.ToSlash(path))+"?mode=rw&_synchronous=FULL")
	if err != nil {
		return err
	}
	defer dst.Close()
	dconn, err := dst.Conn(ctx)
	if err != nil {
		return err
	}
	defer dconn.Close()
	sconn, err := s.rdb.Conn(ctx)
	if err != nil {
		return err
	}
	defer sconn.Close()
	return dconn.Raw(func(d any) error {
		return sconn.Raw(func(src any) error {
			dc, ok1 := d.(*sqlite3.SQLiteConn)
			sc, ok2 := src.(*sqlite3.SQLiteConn)
			if !ok1 || !ok2 {
				return errors.New("not a go-sqlite3 connection")
			}
			b, err := dc.Backup("main", sc, "main")
			if err != nil {
				return fmt.Errorf("start: %w", err)
			}
			done, err := b.Step(-1) // all pages: one read transaction
			if ferr := b.Finish(); err == nil {
				err = ferr
			}
			if err == nil && !done {
				err = errors.New("backup step ended before the last page")
			}
			return err
		})
	})
}
