package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrReadOnly: a Ledger opened with OpenReadOnly was asked to write.
var ErrReadOnly = errors.New("ledger opened read-only")

// OpenReadOnly opens an existing ledger for reading only (ledger serve):
// nothing is created, the schema is not applied, no writer runs, and the
// database itself refuses writes: SQLite connections open the file with
// mode=ro and query_only, PostgreSQL sessions start with
// default_transaction_read_only. Every write (Claim, Finish, PurgeDone, …)
// fails with ErrReadOnly. A ledger whose schema is older than this
// binary's is refused, since its reads need the columns the schema adds:
// any other command of this version (ledger stats) brings it up to date.
func OpenReadOnly(db string, opts ...Option) (*Ledger, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	cfg.mustExist, cfg.readOnly = true, true
	return open(db, cfg)
}

// errOldSchema refuses, for reading only, a ledger not yet brought up to
// this binary's schema.
func errOldSchema(v int64) error {
	return fmt.Errorf("schema version %d is older than this binary's %d: run any other ledger command of this version once (ledger stats), which brings it up to date: %w",
		v, SchemaVersion, ErrNotLedger)
}

// openReadOnly is openSQLite for OpenReadOnly: the read pool only, with
// mode=ro, checked to be a ledger of this binary's schema.
func (s *sqliteStore) openReadOnly(path string) (*sqliteStore, string, error) {
	s.readOnly = true
	s.shut()
	close(s.writerDone)
	rdb, err := sql.Open("sqlite3", s.dsn("ro", false))
	if err != nil {
		return nil, "", fmt.Errorf("ledger: open %s: %w", path, err)
	}
	rdb.SetMaxOpenConns(s.cfg.readConns)
	rdb.SetMaxIdleConns(s.cfg.readConns)
	ctx := context.Background()
	err = func() error {
		tx, err := rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return classifyOpenErr(fmt.Errorf("begin: %w", err))
		}
		defer tx.Rollback()
		_, v, err := sqliteLedgerVersion(ctx, tx, true)
		if err != nil {
			return err
		}
		if v < SchemaVersion {
			return errOldSchema(v)
		}
		return nil
	}()
	if err != nil {
		rdb.Close()
		return nil, "", fmt.Errorf("ledger: open %s: %w", path, err)
	}
	s.rdb = rdb
	return s, s.path, nil
}

// checkPostgresReadOnly is applyPostgresSchema's checks, for OpenReadOnly:
// the tables of a ledger of this binary's schema, in a read-only
// transaction.
func checkPostgresReadOnly(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.Background())
	var hasTx, hasVersion bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass('tx') IS NOT NULL, to_regclass('schema_version') IS NOT NULL`).Scan(&hasTx, &hasVersion); err != nil {
		return fmt.Errorf("read tables: %w", err)
	}
	if !hasTx {
		return fmt.Errorf("no tx table: %w", ErrNotLedger)
	}
	if err := checkPostgresTx(ctx, tx); err != nil {
		return err
	}
	var v *int64
	if hasVersion {
		if err := tx.QueryRow(ctx, `SELECT MAX(version) FROM schema_version`).Scan(&v); err != nil {
			return fmt.Errorf("read schema_version: %w", err)
		}
	}
	switch {
	case v == nil:
		return errOldSchema(0)
	case *v > SchemaVersion:
		return fmt.Errorf("schema version %d is newer than this binary's %d: %w", *v, SchemaVersion, ErrNotLedger)
	case *v < SchemaVersion:
		return errOldSchema(*v)
	}
	return nil
}
