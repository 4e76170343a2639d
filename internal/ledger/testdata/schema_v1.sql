-- The LH-STD relay's idempotency ledger (SPEC section 6).
--
-- Applied by ledger.Open at every start, inside one BEGIN IMMEDIATE
-- transaction. Every statement is idempotent, so applying this file twice
-- changes nothing.
--
-- The tx columns, their names and types are part of the external contract:
-- never rename or retype them. A column added later must carry a DEFAULT so
-- that a row inserted with only the columns below stays valid; such a change
-- is a new schema version (a new row in schema_version, plus the ALTER TABLE
-- run from Go only when the column is missing, since ALTER TABLE ADD COLUMN
-- is not idempotent).

CREATE TABLE IF NOT EXISTS tx (
    -- NOT NULL because SQLite, for historical reasons, lets a non-INTEGER
    -- PRIMARY KEY hold NULL, and a NULL key would defeat ON CONFLICT(guid).
    guid       TEXT PRIMARY KEY NOT NULL,
    tx_code    TEXT,
    state      TEXT CHECK (state IN
                   ('RECEIVED','SENT','DONE','UNKNOWN','FAILED')),
    rsp_code   TEXT,
    request    BLOB,  -- the whole request frame as received
    response   BLOB,  -- the whole response frame as sent
    attempts   INTEGER,
    updated_at TEXT   -- datetime('now'): 'YYYY-MM-DD HH:MM:SS', UTC
);

-- The batch commands select by state and age (resolve: UNKNOWN and stale
-- SENT rows; reprocess: FAILED rows; purge: old DONE rows), and Stats looks
-- for the oldest UNKNOWN row: all of them are range scans on this index.
CREATE INDEX IF NOT EXISTS tx_state_updated_at ON tx(state, updated_at);

-- One row per schema version applied. Open refuses a ledger whose highest
-- version is newer than the binary knows, so an old binary cannot write a
-- file a newer one has migrated.
CREATE TABLE IF NOT EXISTS schema_version (
    version    INTEGER PRIMARY KEY,
    applied_at TEXT NOT NULL DEFAULT (datetime('now'))
);

INSERT OR IGNORE INTO schema_version(version) VALUES (1);
