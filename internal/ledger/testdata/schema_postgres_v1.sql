-- The LH-STD relay's idempotency ledger on PostgreSQL (SPEC sections 6, 6a).
--
-- Applied by ledger.Open at every start, in one transaction that first
-- takes a transaction-scoped advisory lock, so that relays starting at the
-- same instant apply it one after the other (CREATE TABLE IF NOT EXISTS is
-- not safe against a concurrent CREATE of the same table). Every statement
-- is idempotent, so applying this file twice changes nothing.
--
-- The same table and columns as schema.sql, in PostgreSQL's types; the
-- rules for changing it are the same (a new column carries a DEFAULT; a
-- change is a new schema version).

CREATE TABLE IF NOT EXISTS tx (
    guid       text PRIMARY KEY,
    tx_code    text,
    state      text CHECK (state IN
                   ('RECEIVED','SENT','DONE','UNKNOWN','FAILED')),
    rsp_code   text,
    request    bytea,        -- the whole request frame as received
    response   bytea,        -- the whole response frame as sent
    attempts   integer,
    updated_at timestamptz   -- the time of the last change, the database's clock
);

-- The batch commands select by state and age, and page on (updated_at,
-- guid): with guid in the index each page is one range of it.
CREATE INDEX IF NOT EXISTS tx_state_updated_at ON tx(state, updated_at, guid);

CREATE TABLE IF NOT EXISTS schema_version (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO schema_version(version) VALUES (1) ON CONFLICT DO NOTHING;
