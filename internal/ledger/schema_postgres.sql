-- The LH-STD relay's idempotency ledger on PostgreSQL (SPEC sections 6, 6a).
--
-- Applied by ledger.Open at every start, in one transaction that first
-- takes a transaction-scoped advisory lock, so that relays starting at the
-- same instant apply it one after the other (CREATE TABLE IF NOT EXISTS is
-- not safe against a concurrent CREATE of the same table). Every statement
-- is idempotent, so applying this file twice changes nothing.
--
-- The same table and columns as schema.sql, in PostgreSQL's types; the
-- rules for changing it are the same (a new column carries a DEFAULT or
-- allows NULL, and goes into addedColumns too; a change is a new schema
-- version).

CREATE TABLE IF NOT EXISTS tx (
    guid       text PRIMARY KEY,
    tx_code    text,
    state      text CHECK (state IN
                   ('RECEIVED','SENT','DONE','UNKNOWN','FAILED')),
    rsp_code   text,
    request    bytea,        -- the whole request frame as received
    response   bytea,        -- the whole response frame as sent
    attempts   integer,
    updated_at timestamptz,  -- the time of the last change, the database's clock
    prev_rsp_code text,                     -- version 2
    claim_token   text NOT NULL DEFAULT '', -- see below
    hist_key      bigint                    -- version 3
);

-- The batch commands select by state and age, and page on (updated_at,
-- guid): with guid in the index each page is one range of it.
CREATE INDEX IF NOT EXISTS tx_state_updated_at ON tx(state, updated_at, guid);

CREATE TABLE IF NOT EXISTS schema_version (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO schema_version(version) VALUES (1) ON CONFLICT DO NOTHING;

-- Version 2: the history of every row (SPEC 6b), as in schema.sql, and
-- tx.prev_rsp_code, the rsp_code a transition replaced (for the entry).
-- Each relay appends to its own chain (its own rows of history and its own
-- row of history_chain), so the history adds no lock shared across relays.

CREATE TABLE IF NOT EXISTS history (
    chain        text NOT NULL,
    seq          bigint NOT NULL,
    prev_hash    text NOT NULL,
    hash         text NOT NULL,
    guid         text NOT NULL,
    at           timestamptz NOT NULL,  -- the server's clock_timestamp() before the COMMIT
    state_before text NOT NULL,
    rsp_before   text NOT NULL,
    state_after  text NOT NULL,
    rsp_after    text NOT NULL,
    attempts     integer NOT NULL,
    command      text NOT NULL,
    host         text NOT NULL,
    pid          integer NOT NULL,
    reason       text NOT NULL,
    http_status  integer NOT NULL,
    took_us      bigint NOT NULL,
    hist_key     bigint,  -- version 3
    PRIMARY KEY (chain, seq)
);

CREATE INDEX IF NOT EXISTS history_guid ON history(guid);

CREATE TABLE IF NOT EXISTS history_chain (
    chain      text PRIMARY KEY,
    command    text NOT NULL,
    host       text NOT NULL,
    pid        integer NOT NULL,
    started_at timestamptz NOT NULL,
    head_seq   bigint NOT NULL,
    head_hash  text NOT NULL,
    cut_seq    bigint NOT NULL DEFAULT 0,
    cut_hash   text NOT NULL DEFAULT ''
);

INSERT INTO schema_version(version) VALUES (2) ON CONFLICT DO NOTHING;

-- tx.claim_token (NOT NULL DEFAULT ''): a value unique to each claim,
-- written by the claim's INSERT and by every re-claim. (guid, attempts) does not identify a claim:
-- a claim whose COMMIT never landed leaves the GUID to a fresh claim with
-- the same attempts, and the unconfirmed claim's abandon must not take
-- that one's row. Binaries that do not know the column leave it '' and
-- stay correct; so the schema version is unchanged and they still open it.

-- Version 3: tx.hist_key and history.hist_key, as in schema.sql, which
-- says why. Here history_guid stays the index every lookup uses:
-- PostgreSQL's WAL records an index entry rather than its page (but for a
-- page's first change after a checkpoint), so a random key costs it little;
-- and an index built on a live shared ledger would hold every relay's
-- history INSERTs for as long as it took. The keys are written all the
-- same: both stores run the same statements.
INSERT INTO schema_version(version) VALUES (3) ON CONFLICT DO NOTHING;

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
