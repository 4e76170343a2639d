package ledger

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/testkit"
)

func TestSchemaAppliedTwiceIsHarmless(t *testing.T) {
	path := dbPath(t)
	ctx := context.Background()

	l, err := Open(path)
	assert.NilError(t, err)
	r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	seed(t, l, r, StateDone, codeOK)
	assert.NilError(t, l.Close())

	// Re-open (schema applied again) and apply schema.sql twice by hand.
	l = openLedger(t, path)
	db := rawDB(t, path)
	for i := 0; i < 2; i++ {
		_, err := db.Exec(schemaSQL)
		assert.NilError(t, err)
	}

	row, err := l.Get(ctx, r.GUID)
	assert.NilError(t, err)
	assert.Equal(t, row.State, StateDone)

	var versions, maxVersion int
	assert.NilError(t, db.QueryRow(`SELECT COUNT(*), MAX(version) FROM schema_version`).Scan(&versions, &maxVersion))
	assert.Equal(t, versions, SchemaVersion) // one row per version
	assert.Equal(t, maxVersion, SchemaVersion)

	var mode string
	assert.NilError(t, db.QueryRow(`PRAGMA journal_mode`).Scan(&mode))
	assert.Equal(t, mode, "wal")

	// The writer's connection settings (the read pool's too, for
	// busy_timeout and query_only).
	var sync, busy, ckpt int
	assert.NilError(t, sqliteOf(l).do(ctx, operation{run: opFunc(func(tx stmts) error {
		if err := tx.queryRow(`PRAGMA wal_autocheckpoint`).Scan(&ckpt); err != nil {
			return err
		}
		return tx.queryRow(`SELECT synchronous, timeout FROM pragma_synchronous, pragma_busy_timeout`).Scan(&sync, &busy)
	})}))
	assert.Equal(t, sync, 2, "synchronous must be FULL")
	assert.Equal(t, busy, 10000)
	assert.Equal(t, ckpt, walCheckpointPages)
	var queryOnly int
	assert.NilError(t, sqliteOf(l).rdb.QueryRow(`SELECT query_only FROM pragma_query_only`).Scan(&queryOnly))
	assert.Equal(t, queryOnly, 1)

	var indexes int
	assert.NilError(t, db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type='index' AND name='tx_state_updated_at'`).Scan(&indexes))
	assert.Equal(t, indexes, 1)
}

func TestRowWithOnlySpecColumnsIsValid(t *testing.T) {
	eachStore(t, func(t *testing.T, l *Ledger) {
		db := raw(t, l)
		db.Exec(`INSERT INTO tx(guid, tx_code, state, rsp_code, request, response, attempts, updated_at)
VALUES ('0123456789abcdef0123456789abcdef', 'BKTR0001', 'DONE', '0000', ?, ?, 1, `+db.Now()+`)`, []byte("0"), []byte("1"))
		row, err := l.Get(context.Background(), "0123456789abcdef0123456789abcdef")
		assert.NilError(t, err)
		assert.Equal(t, row.State, StateDone)
		assert.DeepEqual(t, row.Response, []byte("1"))

		// The CHECK constraint of the contract is there.
		_, err = db.TryExec(`INSERT INTO tx(guid, state) VALUES ('x', 'BOGUS')`)
		assert.Assert(t, err != nil)
		assert.Check(t, strings.Contains(strings.ToLower(err.Error()), "check constraint"), "%v", err)
	})
}

func TestOpenExistingRefusesWhatIsNotALedger(t *testing.T) {
	dir := t.TempDir()

	t.Run("missing file", func(t *testing.T) {
		p := filepath.Join(dir, "missing.db")
		_, err := OpenExisting(p)
		assert.ErrorContains(t, err, "ledger file missing, not created")
		assert.Check(t, errors.Is(err, os.ErrNotExist))
		_, statErr := os.Stat(p)
		assert.Check(t, errors.Is(statErr, os.ErrNotExist), "OpenExisting created the file")
	})

	t.Run("missing directory", func(t *testing.T) {
		p := filepath.Join(dir, "nodir", "relay.db")
		_, err := OpenExisting(p)
		assert.ErrorContains(t, err, "directory")
		assert.ErrorContains(t, err, "does not exist")
		_, statErr := os.Stat(filepath.Dir(p))
		assert.Check(t, errors.Is(statErr, os.ErrNotExist), "OpenExisting created the directory")
	})

	t.Run("text file", func(t *testing.T) {
		p := filepath.Join(dir, "notes.txt")
		text := []byte("this is not a database, it is a long enough line of text\n")
		assert.NilError(t, os.WriteFile(p, text, 0o644))
		_, err := OpenExisting(p)
		assert.ErrorContains(t, err, "not a SQLite database")
		assert.Check(t, errors.Is(err, ErrNotLedger))
		got, _ := os.ReadFile(p)
		assert.DeepEqual(t, got, text) // untouched
	})

	t.Run("empty file", func(t *testing.T) {
		p := filepath.Join(dir, "empty.db")
		assert.NilError(t, os.WriteFile(p, nil, 0o644))
		_, err := OpenExisting(p)
		assert.Check(t, errors.Is(err, ErrNotLedger))
		st, _ := os.Stat(p)
		assert.Equal(t, st.Size(), int64(0))
	})

	t.Run("directory", func(t *testing.T) {
		_, err := OpenExisting(dir)
		assert.ErrorContains(t, err, "is a directory")
	})

	t.Run("sqlite without tx", func(t *testing.T) {
		p := filepath.Join(dir, "other.db")
		db := rawDBMode(t, p, "rwc")
		_, err := db.Exec(`CREATE TABLE accounts(id INTEGER PRIMARY KEY)`)
		assert.NilError(t, err)
		_, err = OpenExisting(p)
		assert.ErrorContains(t, err, "no tx table")
		assert.Check(t, errors.Is(err, ErrNotLedger))
		var n int
		assert.NilError(t, db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE name='tx'`).Scan(&n))
		assert.Equal(t, n, 0, "OpenExisting created a tx table")

		// The relay's Open refuses it too: it has tables, none of them tx.
		_, err = Open(p)
		assert.Check(t, errors.Is(err, ErrNotLedger))
		assert.ErrorContains(t, err, "accounts")
	})

	t.Run("tx without the columns", func(t *testing.T) {
		p := filepath.Join(dir, "badtx.db")
		db := rawDBMode(t, p, "rwc")
		_, err := db.Exec(`CREATE TABLE tx(guid TEXT PRIMARY KEY, state TEXT)`)
		assert.NilError(t, err)
		for _, open := range []func(string, ...Option) (*Ledger, error){Open, OpenExisting} {
			_, err = open(p)
			assert.Check(t, errors.Is(err, ErrNotLedger))
			assert.Check(t, is.ErrorContains(err, "lacks columns tx_code, rsp_code, request, response, attempts, updated_at"))
		}
	})

	t.Run("newer schema version", func(t *testing.T) {
		p := filepath.Join(dir, "newer.db")
		l, err := Open(p)
		assert.NilError(t, err)
		assert.NilError(t, l.Close())
		_, err = rawDB(t, p).Exec(`INSERT INTO schema_version(version) VALUES (?)`, SchemaVersion+1)
		assert.NilError(t, err)
		_, err = OpenExisting(p)
		assert.Check(t, errors.Is(err, ErrNotLedger))
		assert.ErrorContains(t, err, "newer")
	})

	t.Run("existing ledger", func(t *testing.T) {
		p := filepath.Join(dir, "good.db")
		l, err := Open(p)
		assert.NilError(t, err)
		assert.NilError(t, l.Close())
		l, err = OpenExisting(p)
		assert.NilError(t, err)
		assert.NilError(t, l.Ping(context.Background()))
		assert.NilError(t, l.Close())
	})
}

func TestOpenCreatesFileButNotDirectory(t *testing.T) {
	dir := t.TempDir()

	_, err := Open(filepath.Join(dir, "nodir", "relay.db"))
	assert.ErrorContains(t, err, "does not exist")
	_, statErr := os.Stat(filepath.Join(dir, "nodir"))
	assert.Check(t, errors.Is(statErr, os.ErrNotExist))

	l, err := Open(filepath.Join(dir, "new.db"))
	assert.NilError(t, err) // a missing file is created…
	assert.NilError(t, l.Close())
	p := filepath.Join(dir, "text.db")
	assert.NilError(t, os.WriteFile(p, []byte("definitely not SQLite, and long enough"), 0o644))
	_, err = Open(p) // …but an existing non-SQLite file is refused
	assert.Check(t, errors.Is(err, ErrNotLedger))

	// Odd characters in the path stay part of the file name.
	odd := filepath.Join(dir, "a?b#c%20d.db")
	l, err = Open(odd)
	assert.NilError(t, err)
	assert.NilError(t, l.Close())
	_, err = os.Stat(odd)
	assert.NilError(t, err)
}

func TestClosedLedger(t *testing.T) {
	testkit.EachStore(t, testClosedLedger)
}

func testClosedLedger(t *testing.T, db string) {
	l, err := Open(db)
	assert.NilError(t, err)
	assert.NilError(t, l.Close())
	assert.NilError(t, l.Close()) // idempotent
	ctx := context.Background()
	_, err = l.Claim(ctx, request(txTransfer, testkit.GUID(), sentAt1, bodyA))
	assert.Check(t, errors.Is(err, ErrClosed))
	_, err = l.Get(ctx, testkit.GUID())
	assert.Check(t, errors.Is(err, ErrClosed))
	assert.Check(t, errors.Is(l.Ping(ctx), ErrClosed))
}
