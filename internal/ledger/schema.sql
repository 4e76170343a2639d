-- The LH-STD relay's idempotency ledger (SPEC section 6).
--
-- Applied by ledger.Open at every start, inside one BEGIN IMMEDIATE
-- transaction. Every statement is idempotent, so applying this file twice
-- changes nothing.
--
-- The tx columns of SPEC 6, their names and types, are part of the
-- external contract: never rename or retype them. A column added later
-- must carry a DEFAULT (or allow NULL) so that a row inserted with only
-- the SPEC's columns stays valid. It goes into the CREATE TABLE below, for
-- a new ledger, and into addedColumns (store.go): Open adds it to an older
-- ledger's table before running this file (ALTER TABLE ADD COLUMN is not
-- idempotent), so that this file's indexes may use it.

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
    updated_at TEXT,  -- datetime('now'): 'YYYY-MM-DD HH:MM:SS', UTC
    prev_rsp_code TEXT,                     -- version 2
    claim_token   TEXT NOT NULL DEFAULT '', -- see below
    hist_key      INTEGER                   -- version 3
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

-- Version 2: the history of every row (SPEC 6b). tx gains prev_rsp_code
-- (NULL by default): a transition sets it to the rsp_code it replaces and
-- returns it for the history entry.
--
-- The history itself: One entry per change of a
-- tx row, written in the same transaction, never updated; see the package
-- doc ("History") for the chain. at is the transaction's time,
-- 'YYYY-MM-DD HH:MM:SS.ffffff' UTC; took_us the core call's duration in
-- microseconds (0: no call); an empty state is "no row".
CREATE TABLE IF NOT EXISTS history (
    chain        TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    prev_hash    TEXT NOT NULL,
    hash         TEXT NOT NULL,
    guid         TEXT NOT NULL,
    at           TEXT NOT NULL,
    state_before TEXT NOT NULL,
    rsp_before   TEXT NOT NULL,
    state_after  TEXT NOT NULL,
    rsp_after    TEXT NOT NULL,
    attempts     INTEGER NOT NULL,
    command      TEXT NOT NULL,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    reason       TEXT NOT NULL,
    http_status  INTEGER NOT NULL,
    took_us      INTEGER NOT NULL,
    hist_key     INTEGER,  -- version 3
    PRIMARY KEY (chain, seq)
);

-- One row per chain: its writer, its head (the last entry appended, so
-- that removing the last entries shows) and its cut (the last entry a
-- purge of history removed, whose hash the first remaining entry links
-- to).
CREATE TABLE IF NOT EXISTS history_chain (
    chain      TEXT PRIMARY KEY NOT NULL,
    command    TEXT NOT NULL,
    host       TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    head_seq   INTEGER NOT NULL,
    head_hash  TEXT NOT NULL,
    cut_seq    INTEGER NOT NULL DEFAULT 0,
    cut_hash   TEXT NOT NULL DEFAULT ''
);

INSERT OR IGNORE INTO schema_version(version) VALUES (2);

-- tx.claim_token (NOT NULL DEFAULT ''): a value unique to each claim,
-- written by the claim's INSERT and by every re-claim. (guid, attempts) does not identify a claim:
-- a claim whose COMMIT never landed leaves the GUID to a fresh claim with
-- the same attempts, and the unconfirmed claim's abandon must not take
-- that one's row. Binaries that do not know the column leave it '' and
-- stay correct; so the schema version is unchanged and they still open it.

-- Version 3: how ledger history GUID finds a GUID's entries without an
-- index on history(guid) that every entry writes into. GUIDs are random,
-- so each entry's key in such an index lands on a page of its own, and
-- SQLite's WAL writes a whole page for every page a COMMIT changes: that
-- index was two of the three pages a transfer dirtied at random (the
-- third is tx's own index on guid), most of the ledger's write volume.
--
-- Instead each row gets, when its claim inserts it, hist_key: a number
-- that grows with time (the claim's time in microseconds; equal keys are
-- harmless, every lookup also compares the GUID). Every entry of a change
-- of the row copies the row's hist_key, so history_key's new keys are
-- close together, on the index's last pages. A GUID's entries are those
-- with its row's hist_key, or the hist_key of an entry that ended a row
-- (a purge, state_after ''), found through history_guid_unkeyed, which
-- also holds the entries with no key: those written before version 3 or
-- for a row that has none (a row from before version 3, a copied row).
-- Audit checks that every entry can be found so. It is a new version
-- because an older binary would purge a keyed row with an entry that has
-- no key, after which the row's entries could not be found: an older
-- binary refuses to open the ledger.
CREATE INDEX IF NOT EXISTS history_key ON history(hist_key);
CREATE INDEX IF NOT EXISTS history_guid_unkeyed ON history(guid) WHERE hist_key IS NULL OR state_after = '';
DROP INDEX IF EXISTS history_guid;

INSERT OR IGNORE INTO schema_version(version) VALUES (3);

-- resolve and reprocess take their rows oldest first by the time each was
-- first claimed (hist_key, which no change moves), so the customers who
-- waited longest are served first after an outage, and page through them
-- by (hist_key, guid). One partial index per state they select in bulk,
-- (state, hist_key, guid) so that it also serves their state = … condition:
-- a row enters one only when its call failed (FAILED) or its outcome is
-- unknown (UNKNOWN), so the hot path, whose rows go SENT → DONE, writes
-- neither. Stale SENT rows are few (a dead relay's calls in flight) and
-- are sorted. No schema version: a binary that does not know the indexes
-- keeps them up to date all the same.
CREATE INDEX IF NOT EXISTS tx_unknown_first_claim ON tx(state, hist_key, guid) WHERE state = 'UNKNOWN';
CREATE INDEX IF NOT EXISTS tx_failed_first_claim ON tx(state, hist_key, guid) WHERE state = 'FAILED';
