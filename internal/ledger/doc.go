// Package ledger is the durable idempotency ledger of the LH-STD relay
// (SPEC sections 6 and 6a): one row per GUID, and the one place that owns
// the row state machine (RECEIVED, SENT, DONE, UNKNOWN, FAILED). The relay
// and the batch commands (resolve, reprocess, purge) are built on it. It is
// content-agnostic: it stores frames and response codes it is given and
// never parses a frame.
//
// # One state machine, two stores
//
// A ledger lives in a SQLite file (the embedded default: one relay, one
// host) or in a PostgreSQL database shared by several relays and batch
// commands on several hosts (--db postgres://…). Ledger is the same type
// for both. Its rules are written once (claim.go, read.go), as statements
// in SQL both accept: the claim is one INSERT … ON CONFLICT (guid) DO
// NOTHING whose affected-row count decides; an existing row's fingerprint
// (TX_CODE + body) is compared on every path; every transition is one
// UPDATE conditional on the state it expects, its affected-row count
// deciding. A store (store.go) runs those statements: how they reach the
// database, how commits are grouped, how connections are pooled and how
// updated_at is stored are all it decides.
//
// # Why the SQLite settings are what they are
//
// Every connection gets its PRAGMAs from the DSN, because a PRAGMA run once
// after sql.Open reaches only one pooled connection:
//
//   - _journal_mode=WAL: readers (Get, List, Stats, another process's
//     reads) never block the writer and the writer never blocks them; a
//     commit appends to the WAL and needs one fsync.
//   - _synchronous=FULL: in WAL mode NORMAL does not fsync at COMMIT, so
//     a power loss could forget a claim the core was already called for.
//     FULL fsyncs the WAL at every COMMIT: a claimed row is on disk before
//     Claim returns (SPEC 6: durable before the core is called).
//   - _txlock=immediate: every transaction starts with BEGIN IMMEDIATE,
//     taking the write lock up front. A deferred transaction that reads
//     and then writes gets SQLITE_BUSY at once when another connection
//     (the relay and a batch command on the same file) wrote meanwhile,
//     ignoring the busy timeout; BEGIN IMMEDIATE waits instead.
//   - _busy_timeout (default 10 s, WithBusyTimeout): SQLite has one writer
//     at a time even in WAL. A process that finds the write lock taken
//     waits up to this long. Every writer here holds the lock for one short
//     transaction (a group-commit batch, or a purge chunk), so normal
//     contention never surfaces as "database is locked".
//   - _foreign_keys=1: none today; set so a later migration that adds one
//     is enforced everywhere.
//   - never cache=shared: it turns SQLITE_BUSY into SQLITE_LOCKED, which
//     ignores the busy timeout.
//   - _stmt_cache_size: the same few statements run many thousand times a
//     second; the driver's per-connection cache avoids re-preparing them.
//   - _mutex=no: a connection is only ever used by one goroutine at a
//     time, so SQLite's per-connection mutex only cost a lock and an
//     unlock around every call.
//   - wal_autocheckpoint=4000 (walCheckpointPages, the writer's connection
//     only, where every COMMIT is): a checkpoint copies each page the WAL
//     holds into the file once, however many commits rewrote it, and the
//     pages a transfer dirties are mostly the same few (the indexes' and
//     the history's last pages, the row's). Every 4,000 pages (16 MB of
//     WAL) rather than SQLite's 1,000 writes them a quarter as often:
//     about 7% of the relay's CPU at 64 channels (one run, alternating,
//     six pairs: 1–25% less in each). Durability does not change (each
//     COMMIT still fsyncs the WAL); the WAL a restart replays is longer.
//     On a file system smaller than 16 times that (about 260 MB), fewer
//     pages: a sixteenth of the file system (walPages), because the WAL
//     must never take the room its own checkpoint needs. A transfer
//     writes about 20 KB of WAL (at 8 channels) for about 1.2 KB of
//     rows; a checkpoint grows the database file by the pages the WAL
//     holds that it has not, and until it has run the WAL cannot start
//     again from its beginning. A WAL allowed 16 MB on a 16 MiB disk
//     fills the disk, its checkpoint finds no room to grow the file
//     (SQLite ignores a failed automatic checkpoint), and every COMMIT
//     from then on needs more WAL: each fails with "database or disk is
//     full", for good, though nothing but the WAL is on the disk.
//   - journal_size_limit, twice the checkpoint's WAL: a WAL file keeps
//     the size it once reached. Cut back at the first COMMIT after a
//     checkpoint, it gives back what a transaction far larger than the
//     threshold (or a checkpoint held off by a reader) made it grow to,
//     and leaves alone the few pages each checkpoint's last batch adds
//     past the threshold.
//
// The files are opened as SQLite URIs with mode=rwc (Open) or mode=rw
// (OpenExisting): SQLite never creates a directory, and mode=rw never
// creates a file, so a batch command pointed at a wrong path fails instead
// of starting an empty ledger.
//
// # SQLite: group commit
//
// The disk does about 2,000 fsyncs a second, and each transfer needs a
// claim and an outcome: one commit each would cap the relay near 1,000
// transfers a second. So one writer goroutine owns the only write
// connection. Claim, Finish, Transition, Reclaim, PurgeDone and Ping
// enqueue an operation and wait; FinishLater enqueues one and returns, and
// the writer calls back with its result. The writer takes the first queued
// operation, runs BEGIN IMMEDIATE, then takes whatever else is queued (up
// to WithMaxBatch, default 256) and runs each operation's own statements in
// that one transaction, in queue order, then COMMITs once. Each operation's
// own affected-row counts decide its result: two claims of one GUID in the
// same batch run one after the other, so the first INSERT affects one row
// and the second none. Replies go out only after the COMMIT succeeded; if
// it fails, every operation in the batch gets the error and none reports
// success. There is no timer: while one batch is being fsynced the next one
// queues up, so batches grow with load and a lone request is not delayed.
//
// One exception to "no timer": an outcome queued by FinishLater (nobody
// waits for it; its answer has been given) that finds the writer idle
// waits up to a millisecond for another operation before its batch
// commits. With one channel, the channel's next claim arrives a few dozen
// microseconds after its answer: it used to wait for the outcome's fsync
// and then for its own, and now both share one (the relay at one channel,
// BenchmarkLedgerRelay/ledger/c1: 1.95 → 1.00 commits per transfer, p50
// 0.54–0.61 → 0.41–0.47 ms). A claim is never delayed by it (it ends the
// wait), nor is any operation whose caller waits. The writer begins the
// batch's transaction before the wait and runs the outcome's statements
// during it (batchRun.early), so the claim waits only for its own
// statements and the COMMIT; SQLite's write lock is then held through
// the wait, a millisecond at most, which another process's writer waits
// out under its busy timeout.
//
// After replying to a batch the writer yields its processor
// (runtime.Gosched) before starting the next. The callers it woke are queued
// on its processor, and a goroutine in a cgo call keeps its processor; so
// without the yield they would wait there while the writer executes the next
// batch in SQLite. Measured with the relay at 256 channels (core in its own
// process): 11.4k instead of 9.0k transfers a second, half the commits per
// transfer; ledger alone at 16 channels 21k instead of 14.7k; at 64
// channels both within noise.
//
// Operations run without savepoints, because none can leave half its work
// behind: each makes at most one write, as its last statement, and SQLite
// statements are atomic. A refusal (a conditional UPDATE that matched no
// row, ErrStateChanged) is that operation's result and the batch goes on.
// Any other failed statement rolls the whole batch back and the writer
// runs its operations again, each in a transaction of its own: one
// operation's failure stays its own, and if SQLite itself aborted the
// transaction (disk full, I/O error) nobody is told a write succeeded that
// was undone. A savepoint per operation did the same at three statements
// more per operation: about half the writer's time per operation.
//
// Cancelling an operation's context before the writer has taken it drops
// the operation: the method returns the context's error and nothing was
// written. Once the writer has taken it (only after BEGIN IMMEDIATE
// succeeded, so never while waiting for another process's lock) the method
// waits for the COMMIT and reports the real result, because a claim that
// committed while its caller walked away would leave a SENT row nobody is
// working on. The writer itself never runs a caller's context: an
// interrupted statement would abort everybody's transaction.
//
// The writer talks to its connection through the driver itself
// (sqliteWriter, inside the one sql.Conn.Raw call its goroutine runs in),
// with every statement prepared once for the Ledger's life: database/sql's
// pool locks, contexts, argument slices and result wrappers buy nothing
// for one connection that one goroutine uses, and cost a transfer about
// eight allocations and a fifth of the writer's CPU (BenchmarkClaimFinish,
// sqlite, 64 channels: 44 → 36 allocations).
//
// Reads (Get, List, Stats, a dry-run PurgeDone) use a separate pool of
// read-only (query_only) connections (WithReadConns, default 4) and see
// every committed write.
//
// # PostgreSQL: a writer that pipelines batches
//
// The writer loop is SQLite's (runWriter: take, drain, run, reply, yield);
// each store brings only its batch step (batchStep). As on SQLite, one
// writer goroutine takes every operation queued (up to WithMaxBatch) and
// runs them in one transaction on one connection, then COMMITs once;
// replies go out only after the COMMIT. What differs is how
// the statements travel: a round trip to a server is far dearer than a
// call into SQLite, so the writer runs every operation of the batch on a
// goroutine of its own, and once all of them wait for a statement's
// result, sends those statements together in one round trip (pgBatch:
// pgconn's batch, one Sync), ordered by GUID and then by queue order. A batch of claims and
// outcomes is thus BEGIN, one round (two when a claim finds a row), COMMIT.
// The operations are the same ones the SQLite writer runs one after
// another; side by side they stay correct for the reason concurrent
// transactions do: every decision is a conditional statement's affected
// rows on the row as it is then, and operations on one GUID keep their
// queue order in every round. So a claim queued behind an outcome of the
// same GUID sees the outcome (FinishLater's promise), in this process.
//
// Measured against the alternative, every statement its own transaction on
// a pool of 32 connections (PostgreSQL does group the WAL flushes of
// concurrent commits itself): at 64 channels 3.8k transfers a second
// (27% of the SQLite ledger), 0.57 WAL flushes and 280 µs of the server's
// CPU per transfer; with the writer 10.8k (74%), 0.034 flushes and 39 µs.
// Per-transaction work and per-statement round trips, not the disk, were
// what the server spent its time on.
//
// No transaction is open, and no row lock held, while the core is called:
// a batch's transaction holds its rows' locks for one or two round trips
// and a commit (the Stripe pattern: claim, call, record, each committed on
// its own). Relays sharing the database meet at the primary key: a claim
// of a GUID another relay's open batch has just inserted waits for that
// batch to commit, then finds the row. Rows are locked in GUID order in
// each round, so two relays' batches do not deadlock over their claims; a
// deadlock that still happens (re-claims of FAILED rows in crossing order)
// is broken by the server and handled as a refused statement, below.
//
// Across relays there is no queue: a retry that reaches another relay in
// the millisecond before an outcome commits finds the row SENT and gets
// E903, which is true (the outcome is not recorded yet) and safe (the
// channel retries and gets the replay).
//
// Session settings are fixed by the ledger in every connection's startup
// packet, whatever the server's or the role's defaults:
// synchronous_commit=on (a claim must survive a crash of the database
// before the core is called; a URL may ask for remote_apply, a weaker
// value is refused, and every new connection checks it), lock_timeout 5 s
// and statement_timeout 10 s (WithStatementTimeout; the client gives up 2 s
// later), idle_in_transaction_session_timeout, READ COMMITTED (under
// REPEATABLE READ the same statements could fail instead of deciding),
// TimeZone UTC. The schema (schema_postgres.sql) is applied at every Open
// in one transaction that first takes a transaction-scoped advisory lock,
// so relays starting at the same instant apply it one after the other.
// Multi-host URLs (postgres://a:5432,b:5432/db?target_session_attrs=read-write)
// are pgx's: a new connection goes to whichever host is the primary, and
// Ping refuses a connection to a standby. Reads (Get, Scan, Stats) use the
// other connections of the pool (WithPoolSize).
//
// # PostgreSQL: what an error means
//
// All of a batch's writes are in its one transaction, so until the COMMIT
// is sent a failure leaves nothing behind, and the writer knows it:
//
//   - the database down or unreachable, a connection lost before the
//     COMMIT: nothing was written. The batch is tried again, ahead of newer
//     operations, with a growing pause, until each operation's deadline:
//     2 s for a caller who waits (Claim, Finish, …; WithRetry), 30 s for an
//     outcome queued by FinishLater, so that a database restart loses no
//     recorded outcome. Then the operation fails;
//   - a statement refused by the server (a constraint, a timeout, a
//     deadlock): the transaction rolled back; each operation of the batch
//     runs again alone (autocommit), so that the failure stays its own;
//   - the COMMIT sent and its answer lost (a restart, a failover, a network
//     cut at that instant): the outcome is unknown, for every operation of
//     the batch.
//
// A claim that fails is answered E902 by the relay, and the core is not
// called. In the first two cases that is exactly true. In the third the
// claim may have committed: then the row exists, SENT, and nobody will
// call the core for it. E902 is still the right answer, because what it
// promises holds: the core was not called, and resending the same GUID is
// safe. Such a claim's error is an *UnconfirmedClaimError (ErrUnconfirmed)
// carrying its attempts and its claim token, and AbandonClaim turns its
// row, if it turns out to exist still SENT with those attempts and that
// token, into FAILED/E902 (one conditional UPDATE), so that the channel's
// resend re-claims it and sends it once (the relay does this in the
// background as soon as the database answers). The token matters: a claim
// whose COMMIT never landed leaves the GUID free, and a fresh claim of it
// has the same attempts (1) and may have its call under way; attempts
// alone would let the abandon make that row FAILED mid-call, and the
// resend then post it twice. A claim is never run again after an unknown COMMIT: it would
// find its own row and take it for another relay's.
//
// A COMMIT that the server reports done with the warning "canceling wait
// for synchronous replication" committed on the primary only (a failover
// would forget it): its operations get ErrUnconfirmed too (OnNotice marks
// the connection; the writer checks after each COMMIT). PostgreSQL does
// not apply statement_timeout to that wait, so a stalled standby holds a
// COMMIT until a cancel request (that warning) or the client's deadline,
// which drops the connection and loses the answer: both are noticed.
//
// Replication reads pg_stat_replication and synchronous_standby_names,
// and counts as standbys only the WAL senders that feed one (not an
// archiver, a base backup or logical replication: standbySender);
// CheckReplication refuses, at a command's start, a primary with standbys
// attached while no standby is synchronous by configuration.
//
// A transition (Finish, FinishLater, Transition) is run again after an
// unknown COMMIT, and recognises its first run's write when the row holds
// exactly the state, code and response it was writing. If an outcome
// cannot be recorded at all, the relay's policy is the same as on SQLite
// (internal/relay): the row stays SENT for resolve --stale-sent.
//
// Batch commands on several hosts at once: resolve's transitions and
// reprocess's re-claims are conditional UPDATEs, so of two runs that
// selected the same row one changes it and the other finds it changed
// ("skipped"): no row is settled or sent twice. purge deletes in chunks
// whose rows are taken FOR UPDATE SKIP LOCKED, so each row is deleted by
// one run.
//
// # History
//
// Every change of a row (claim, re-claim, outcome, settling, purge, copy)
// appends one entry to the history table (SPEC 6b) in the same transaction
// as the change, and entries are never updated. It is so by construction:
// an operation changes tx rows only through stmts.change, a statement
// whose RETURNING clause gives one result row per row changed, and each
// result row becomes that change's entry (the state and rsp_code before
// and after, attempts, and the Why the caller gave: Finish and Transition
// refuse an Outcome without a reason). A new transition written that way
// has its entry without anyone remembering to write it (and exec, the
// statement runner for the history's own upkeep, refuses to write tx). The
// rsp_code before a transition comes from the row itself, in the same
// statement: the UPDATE sets tx.prev_rsp_code to it (SET sees the row as it
// was) and returns it, under the row's lock. The outcome of a claim is
// first tried as an UPDATE that also requires the rsp_code the claim left
// (empty): when it changes the row, its conditions are the before state,
// with nothing to return (on SQLite RETURNING costs a temporary table, on
// PostgreSQL a result to decode); when it does not, the UPDATE …
// RETURNING runs (on SQLite: the row is read first, under the writer's
// lock, and then changed). History rows
// are inserted by statements whose text does not depend on the batch's
// size (cached INSERTs of 32, 16, … 1 rows on SQLite, one unnest of
// arrays on PostgreSQL, sent in binary), so they are prepared once.
//
// Who: a Ledger writes as one Actor (WithActor; NewActor gives the
// command, host, process id and a random instance id: the relay's chosen
// at start, a batch command's per run). When: the database's clock,
// taken after the transaction's last statement and before its COMMIT
// (PostgreSQL: clock_timestamp() sent with the batch's last round, no
// extra round trip; SQLite: this host's clock, which is SQLite's), so two
// changes of one row are in time order whoever made them.
//
// The chain. Each Ledger appends to a chain of its own, named by its
// instance: entry n holds its sequence number and the hash of entry n-1,
// and its own hash is SHA-256 over a canonical encoding of all its fields
// (entryHash). The writer goroutine, which already owns every write of
// its process, chains the entries of a batch just before the COMMIT and
// writes them with the chain's head row (history_chain: head sequence and
// hash) in the COMMIT's own round trip. So relays never share a lock for
// the history, there is no extra fsync (SQLite) or round trip
// (PostgreSQL), and the head only moves when the COMMIT succeeded; after
// a COMMIT whose outcome is unknown the writer reads its head back from
// the database before the next append.
//
// What Audit detects: an entry edited (its hash no longer matches), removed
// (a gap in the sequence, or the head row ahead of the last entry),
// inserted (a sequence number past the head, or a link that does not
// match) or moved (two entries swapped: their links break), entries of
// a chain whose head row is gone, and an entry whose key no longer leads
// to it from its GUID. What no chain kept in the same database
// can detect: someone able to write the database who rewrites a whole
// chain from some entry on, recomputing every hash and the head row. That
// gap is closed by keeping the heads elsewhere: the relay logs its head
// every minute when it moved and at stop, and exports
// lhrelay_ledger_history_head_seq and _hash per chain; an operator (or a
// log pipeline) compares what ChainHead published with history_chain.
// A purge of history removes a chain's oldest entries and moves its cut
// (history_chain.cut_seq and cut_hash, the last entry removed) in the same
// transaction, and notes it in the purging run's own chain, so the rest
// still verifies and the gap is explained. Rows older than the history
// (a ledger migrated from schema version 1) have entries only from the
// migration on.
//
// Finding a GUID's entries. A row gets a key when its claim inserts it
// (tx.hist_key, the claim's time in microseconds) and every entry of the
// row's changes stores it: the claim's entry from the claim, a purge's
// from the row it deletes, the others from the row, read by the entry's
// INSERT. On SQLite the entries are found through an index on that key,
// whose new entries fall on its last pages, rather than through one on
// the random GUID, which cost two pages of WAL a transfer (schema.sql,
// version 3); the index on GUIDs that remains holds only the entries
// that end a row (a purge's, whose key leads to the row's older entries)
// and those without a key. The key is not hashed (entries from before it
// had none); Audit checks instead that every entry is found from its GUID.
//
// # Time
//
// Every age is measured by the database's clock, the one that stamped
// updated_at: Filter.OlderThan and PurgeDone compare updated_at with
// CURRENT_TIMESTAMP (PostgreSQL) or datetime('now') (SQLite) minus the
// age, in the statement itself, and no selection by age reads the
// process's clock. Hosts' clocks differ; a resolve whose clock ran ahead
// would look up calls still under way (SPEC 6a). Stats reports the
// database's Now beside the oldest rows, for ages shown to operators.
//
// On PostgreSQL updated_at is a timestamptz (CURRENT_TIMESTAMP, with
// microseconds). On SQLite it is datetime('now') text, 'YYYY-MM-DD
// HH:MM:SS' in UTC, so comparisons are text comparisons at whole seconds,
// and an age is rounded up: a row stamped second S is at least age old only
// once the second of now - age is past S (a second late at most, never
// early).
// Filter.UpdatedBefore, an absolute instant, remains for tools and tests
// that list rows around a known time.
//
// # Late answers
//
// Finish and FinishLater carry the attempts of the claim whose outcome they
// record, and every write they make is conditional on them: an answer to
// an earlier attempt never lands on a later claim of the row. If the row
// was settled FAILED while the call was under way (a lookup that came too
// early: "never posted") and nobody has re-claimed it since, the outcome
// is written over it, because the core's answer is the truth; if it was
// re-claimed since, nothing is written and the error is ErrReclaimed
// (counted by Conflicts), for the caller to report.
package ledger
