package ledger

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Actor is who changes rows: the command, its host and process, and the
// instance that names its history chain (a relay's id chosen at start, a
// batch run's id). Every history entry it writes carries it.
type Actor struct {
	Command  string
	Host     string
	PID      int
	Instance string
}

// NewActor is this process as command, with a fresh random instance id
// ("relay-3f9c…"): two starts of one command on one host never share a
// chain.
func NewActor(command string) Actor {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return Actor{Command: command, Host: host, PID: os.Getpid(), Instance: command + "-" + hex.EncodeToString(b[:])}
}

func (a Actor) String() string {
	return fmt.Sprintf("%s on %s pid %d (%s)", a.Command, a.Host, a.PID, a.Instance)
}

// WithActor names who writes through this Ledger (NewActor). Without it a
// Ledger is NewActor of the program's file name.
func WithActor(a Actor) Option {
	return func(c *config) { c.actor = a }
}

// Why is what a history entry says about a change: the reason in words
// (SPEC 6b: "core answered HTTP 200", "lookup 404") and, when a core call
// or lookup decided it, the core's HTTP status (0: no answer) and how long
// the call took.
type Why struct {
	Reason     string
	HTTPStatus int
	Took       time.Duration
}

// Entry is one history entry: one change of one row (SPEC 6b), or a note
// of the ledger's own (GUID "": a purge of history).
type Entry struct {
	// Chain names the writer's chain (its Actor.Instance); Seq numbers its
	// entries from 1; PrevHash is the hash of entry Seq-1 ("" for the
	// first), Hash this entry's (hex SHA-256, see entryHash).
	Chain    string
	Seq      int64
	PrevHash string
	Hash     string

	GUID string
	// At is the time by the database's clock (on SQLite, this host's), to
	// the microsecond, taken once the change's transaction had made its
	// changes and before its COMMIT: of two changes of one row, the first
	// has the earlier (or the same) time.
	At time.Time
	// Before and After: the row's state and rsp_code; an empty state is
	// "no row" (before a claim, after a purge).
	StateBefore State
	RspBefore   string
	StateAfter  State
	RspAfter    string
	// Attempts is the row's attempts after the change (before it, for a
	// purge).
	Attempts int

	Command string
	Host    string
	PID     int

	Why
}

// pending is an entry as an operation records it; the writer adds the
// actor, the time and the chain when its transaction commits.
type pending struct {
	guid                    string
	stateBefore, stateAfter State
	rspBefore, rspAfter     string
	attempts                int
	why                     Why
	// key is the row's hist_key to store with the entry, when the
	// operation knows it (a claim sets it, a purge reads it from the row
	// it deletes); 0: the entry's INSERT reads it from the row
	// (schema.sql, version 3). It is not hashed: Audit checks it otherwise.
	key int64
}

// atLayout is how At is stored on SQLite and hashed on both stores.
const atLayout = "2006-01-02 15:04:05.000000"

// atBuf is the room of the stack buffer At is formatted into, as
// time.Format's own: with only atLayout's length, AppendFormat
// reallocates (BenchmarkEntryHash counts the allocations).
const atBuf = 64

// entryHash is the hash of e: SHA-256 over a canonical encoding of every
// field but Hash (PrevHash included, which links it to the entry before):
// a version tag, then each field as its length (uvarint) and bytes,
// numbers in decimal, At in UTC to the microsecond. Lengths make the
// encoding unambiguous ("ab"+"c" is not "a"+"bc").
func entryHash(e *Entry) string {
	var at [atBuf]byte
	return hashWithAt(e, e.At.UTC().AppendFormat(at[:0], atLayout))
}

// hashWithAt is entryHash with e.At already formatted (as entryHash does):
// the entries of one transaction share their time, formatted once.
func hashWithAt(e *Entry, at []byte) string {
	var hb [2 * sha256.Size]byte
	return string(appendHash(hb[:0], e, e.PrevHash, at))
}

// appendHash appends to dst the hash of e (hashWithAt) with prevHash for
// e.PrevHash: seal chains a transaction's entries in one buffer, each
// hashed after the one before it, before their hashes are strings.
func appendHash[P ~string | ~[]byte](dst []byte, e *Entry, prevHash P, at []byte) []byte {
	// The encoding is built in one buffer on the stack and hashed at once:
	// no allocation.
	var buf [512]byte
	var nb [20]byte // a number, before it is appended as a field
	b := buf[:0]
	num := func(n int64) { b = appendField(b, strconv.AppendInt(nb[:0], n, 10)) }
	b = appendField(b, "lhrelay-history-1")
	b = appendField(b, e.Chain)
	num(e.Seq)
	b = appendField(b, prevHash)
	b = appendField(b, e.GUID)
	b = appendField(b, at)
	b = appendField(b, e.StateBefore)
	b = appendField(b, e.RspBefore)
	b = appendField(b, e.StateAfter)
	b = appendField(b, e.RspAfter)
	num(int64(e.Attempts))
	b = appendField(b, e.Command)
	b = appendField(b, e.Host)
	num(int64(e.PID))
	b = appendField(b, e.Reason)
	num(int64(e.HTTPStatus))
	num(e.Took.Microseconds())
	sum := sha256.Sum256(b)
	return hex.AppendEncode(dst, sum[:])
}

// appendField appends one field of entryHash's encoding: its length
// (uvarint), then its bytes.
func appendField[T ~string | ~[]byte](b []byte, v T) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// ChainHead is the last entry of a chain: what an operator publishes to
// anchor it (see the package doc, "History").
type ChainHead struct {
	Chain string
	Seq   int64
	Hash  string
}

// chain is the writer's own chain: only the writer goroutine appends; the
// head is read by others (ChainHead), hence the mutex.
type chain struct {
	actor Actor
	// actorArgs are the head row's chain, command, host and pid, boxed
	// once; room is the writer's for each transaction's entries and
	// statements (seal, statements). Only the writer uses them.
	actorArgs [4]any
	room      histScratch

	mu   sync.Mutex
	head ChainHead
	// stale: a COMMIT's outcome was unknown, so the head in the database
	// may be ahead of this one; the next transaction reads it first.
	stale bool
}

func newChain(a Actor) *chain {
	if a.Instance == "" {
		a = NewActor(filepath.Base(os.Args[0]))
	}
	return &chain{actor: a, head: ChainHead{Chain: a.Instance}, stale: true,
		actorArgs: [4]any{a.Instance, a.Command, a.Host, int64(a.PID)}}
}

func (c *chain) current() ChainHead {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.head
}

// seal turns a transaction's pending entries into entries after the head,
// at time at, and returns them with the head they lead to; the head moves
// only when the transaction commits (advance).
func (c *chain) seal(ps []pending, at time.Time) ([]Entry, ChainHead) {
	head := c.current()
	at = at.UTC().Truncate(time.Microsecond)
	var atb [atBuf]byte
	atText := at.AppendFormat(atb[:0], atLayout)
	c.room.reset()
	out := slices.Grow(c.room.es[:0], len(ps))[:len(ps)]
	c.room.es = out
	// The hashes are chained in one buffer, each entry's PrevHash the
	// bytes before its own, and become strings together: one text for
	// the transaction rather than one per entry.
	const size = 2 * sha256.Size
	hashes := c.room.hashes[:0]
	for i, p := range ps {
		e := &out[i]
		*e = Entry{
			Chain: head.Chain, Seq: head.Seq + 1 + int64(i), PrevHash: head.Hash,
			GUID: p.guid, At: at,
			StateBefore: p.stateBefore, RspBefore: p.rspBefore, StateAfter: p.stateAfter, RspAfter: p.rspAfter,
			Attempts: p.attempts,
			Command:  c.actor.Command, Host: c.actor.Host, PID: c.actor.PID,
			Why: p.why,
		}
		if i == 0 {
			hashes = appendHash(hashes, e, e.PrevHash, atText)
		} else {
			hashes = appendHash(hashes, e, hashes[size*(i-1):size*i], atText)
		}
	}
	c.room.hashes = hashes
	text := string(hashes)
	for i := range out {
		out[i].Hash = text[size*i : size*(i+1)]
		if i > 0 {
			out[i].PrevHash = out[i-1].Hash
		}
	}
	if len(out) > 0 {
		head.Seq, head.Hash = out[len(out)-1].Seq, out[len(out)-1].Hash
	}
	return out, head
}

// advance makes h the head once the transaction that appended up to it
// committed; nil (no entries appended) leaves the head, and whether it is
// stale, as they were.
func (c *chain) advance(h *ChainHead) {
	if h == nil {
		return
	}
	c.mu.Lock()
	c.head, c.stale = *h, false
	c.mu.Unlock()
}

func (c *chain) markStale() {
	c.mu.Lock()
	c.stale = true
	c.mu.Unlock()
}

func (c *chain) isStale() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stale
}

// The history's statements. history_chain holds each chain's head (so that
// removing a chain's last entries is seen) and its cut (the last entry a
// purge of history removed, so that the first entry left still verifies).
const (
	historyColumns = `chain, seq, prev_hash, hash, guid, at, state_before, rsp_before, state_after, rsp_after, attempts, command, host, pid, reason, http_status, took_us`

	// An entry's INSERT: historyColumns, then hist_key, the entry's own
	// (Entry.key) or else its row's.
	historyMarks = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, COALESCE(?, (SELECT hist_key FROM tx WHERE guid = ?)))`
	historyArgs  = 19

	sqlChainHead = `SELECT head_seq, head_hash FROM history_chain WHERE chain = ?`

	sqlChainUpsert = `INSERT INTO history_chain(chain, command, host, pid, started_at, head_seq, head_hash, cut_seq, cut_hash)
VALUES (?, ?, ?, ?, ?, ?, ?, 0, '')
ON CONFLICT (chain) DO UPDATE SET head_seq = excluded.head_seq, head_hash = excluded.head_hash`
)

// historyInserts are the statements that append entries, in the form
// each store runs cheapest. Their text does not depend on how many entries
// there are, so the drivers' statement caches keep them prepared:
// SQLite runs cached multi-row and single-row INSERTs (below);
// PostgreSQL inserts them all in
// one statement from arrays (unnest), one parse and plan however many.
//
// ps are the pending entries es were sealed from, for their keys; nil:
// every entry takes its row's key.
func historyInserts(d *dialect, es []Entry, ps []pending) []histStmt {
	return new(histScratch).inserts(d, es, ps)
}

// histScratch is a writer's room for the statements that append a
// transaction's history (chain.statements): kept from one transaction to
// the next, so that their slices and argument lists are not made anew
// each time. What it gives is valid until its next use.
type histScratch struct {
	es     []Entry
	hashes []byte // seal's, before they are one string
	qs     []histStmt
	args   []any
	bx     boxes
	pg     pgHistoryColumns // PostgreSQL's INSERT's columns
}

// take is room for n arguments, after those taken since reset.
func (sc *histScratch) take(n int) []any {
	from := len(sc.args)
	if from+n > cap(sc.args) {
		// The slices taken so far keep the old array.
		sc.args, from = make([]any, 0, max(2*cap(sc.args), n)), 0
	}
	sc.args = sc.args[:from+n]
	return sc.args[from : from : from+n]
}

// reset makes the room free again, dropping what it referenced.
func (sc *histScratch) reset() {
	clear(sc.args[:cap(sc.args)])
	clear(sc.qs)
	sc.args, sc.qs = sc.args[:0], sc.qs[:0]
	sc.bx.next()
}

// inserts is historyInserts in sc's room.
func (sc *histScratch) inserts(d *dialect, es []Entry, ps []pending) []histStmt {
	if d == postgresDialect {
		sc.qs = append(sc.qs[:0], sc.pg.insert(es, ps, sc.take(pgHistoryArgs)))
		return sc.qs
	}
	qs := sc.qs[:0]
	bx := &sc.bx
	for from := 0; from < len(es); {
		k := sqliteHistoryRowsLog
		for 1<<k > len(es)-from {
			k--
		}
		n := 1 << k
		args := sc.take(historyArgs * n)
		for i := from; i < from+n; i++ {
			e := &es[i]
			guid := bx.guid(e.GUID)
			var key any
			if k := keyOf(ps, i); k != 0 {
				key = bx.key(k)
			}
			args = append(args, bx.str(e.Chain), e.Seq, bx.str(e.PrevHash), bx.str(e.Hash), guid, bx.at(d, e.At),
				bx.str(string(e.StateBefore)), bx.str(e.RspBefore), bx.str(string(e.StateAfter)), bx.str(e.RspAfter), int64(e.Attempts),
				bx.str(e.Command), bx.str(e.Host), bx.int(e.PID), bx.str(e.Reason), int64(e.HTTPStatus), e.Took.Microseconds(),
				key, guid)
		}
		qs = append(qs, histStmt{sqlHistoryInserts[k], args})
		from += n
	}
	sc.qs = qs
	return qs
}

// boxes holds one boxed copy of the values that repeat across the
// entries of one append (chain, actor, states, codes, reasons, the time,
// each hash as the next entry's PrevHash), so that each is converted to
// an interface once rather than once per entry. Numbers go as int64,
// which database/sql passes on without converting them by reflection.
type boxes struct {
	strs []string
	anys []any
	hits []int  // how often each was found
	keep []bool // forget's
	// guids are the GUIDs of the transaction's operations, as boxed for
	// their own statements (operation.guidArg).
	guids map[string]any
	// keys are the hist_keys the transaction's claims inserted, as boxed
	// for their statements (operation.keyArg).
	keys map[int64]any
	// The most recent, which an entry most often repeats.
	lastAt    time.Time
	lastAtArg any
	lastInt   int
	lastIntV  any
}

// boxesKept bounds the strings boxes remembers: beyond it, a lookup costs
// more than the allocation it saves.
const boxesKept = 32

// reset forgets every box, keeping the room.
func (b *boxes) reset() {
	clear(b.anys)
	clear(b.guids)
	clear(b.keys)
	*b = boxes{strs: b.strs[:0], anys: b.anys[:0], hits: b.hits[:0], keep: b.keep, guids: b.guids, keys: b.keys}
}

// next readies b for the next transaction of its writer: what recurs (the
// actor, states, codes and reasons) and the last hash (the next entry's
// PrevHash) stay boxed, as when it makes room (forget); the GUIDs go.
func (b *boxes) next() {
	clear(b.guids)
	clear(b.keys)
	if len(b.strs) > 0 {
		b.forget()
	}
}

// boxedGUID makes guid's box v, the one its operation's statements used.
func (b *boxes) boxedGUID(guid string, v any) {
	if b.guids == nil {
		b.guids = map[string]any{}
	}
	b.guids[guid] = v
}

// boxedKey makes the box of hist_key v (an int64) v itself.
func (b *boxes) boxedKey(v any) {
	k, ok := v.(int64)
	if !ok {
		return
	}
	if b.keys == nil {
		b.keys = map[int64]any{}
	}
	b.keys[k] = v
}

// key is a hist_key boxed: its claim's box, or a new one.
func (b *boxes) key(k int64) any {
	if v, ok := b.keys[k]; ok {
		return v
	}
	return k
}

// guid is a GUID boxed: its operation's box, or a new one.
func (b *boxes) guid(s string) any {
	if v, ok := b.guids[s]; ok {
		return v
	}
	return s
}

func (b *boxes) str(s string) any {
	for i := len(b.strs) - 1; i >= 0; i-- {
		if b.strs[i] == s {
			b.hits[i]++
			return b.anys[i]
		}
	}
	v := any(s)
	if len(b.strs) == boxesKept {
		b.forget()
	}
	b.strs, b.anys, b.hits = append(b.strs, s), append(b.anys, v), append(b.hits, 0)
	return v
}

// forget makes room, keeping at most half of boxesKept: first what was
// found more than once (the actor, states, codes and reasons, which
// every entry repeats; a hash is found once, as the next entry's
// PrevHash), then the newest two (the last hash), then what was found
// once, newest first; the rest goes.
func (b *boxes) forget() {
	room := boxesKept / 2
	keep := append(b.keep[:0], make([]bool, len(b.strs))...)
	mark := func(i int) {
		if room > 0 && !keep[i] {
			keep[i] = true
			room--
		}
	}
	for i := len(b.strs) - 1; i >= 0; i-- {
		if b.hits[i] > 1 {
			mark(i)
		}
	}
	for i := len(b.strs) - 1; i >= max(0, len(b.strs)-2); i-- {
		mark(i)
	}
	for i := len(b.strs) - 1; i >= 0; i-- {
		if b.hits[i] == 1 {
			mark(i)
		}
	}
	n := 0
	for i, k := range keep {
		if k {
			b.strs[n], b.anys[n], b.hits[n] = b.strs[i], b.anys[i], b.hits[i]
			n++
		}
	}
	clear(b.anys[n:])
	b.strs, b.anys, b.hits, b.keep = b.strs[:n], b.anys[:n], b.hits[:n], keep
}

func (b *boxes) at(d *dialect, t time.Time) any {
	if b.lastAtArg == nil || !t.Equal(b.lastAt) {
		b.lastAt, b.lastAtArg = t, d.atArg(t)
	}
	return b.lastAtArg
}

func (b *boxes) int(n int) any {
	if b.lastIntV == nil || n != b.lastInt {
		b.lastInt, b.lastIntV = n, any(int64(n))
	}
	return b.lastIntV
}

// On SQLite, a transaction's entries go in INSERTs of 32, 16, 8, 4, 2
// and 1 rows, the largest that fits what is left: at most six statements
// (each a call into SQLite and two allocations of the driver's) for up to
// 63 entries, from six texts kept prepared.
const sqliteHistoryRowsLog = 5

// sqlHistoryInserts[k] inserts 1<<k entries.
var sqlHistoryInserts = func() (qs [sqliteHistoryRowsLog + 1]string) {
	for k := range qs {
		qs[k] = `INSERT INTO history(` + historyColumns + `, hist_key) VALUES ` + strings.TrimSuffix(strings.Repeat(historyMarks+", ", 1<<k), ", ")
	}
	return qs
}()

const sqlPgHistoryInsert = `INSERT INTO history(` + historyColumns + `, hist_key)
SELECT ` + historyColumns + `, COALESCE(NULLIF(key, 0), (SELECT hist_key FROM tx WHERE tx.guid = e.guid)) FROM unnest(
?::text[], ?::bigint[], ?::text[], ?::text[], ?::text[], ?::timestamptz[], ?::text[], ?::text[], ?::text[], ?::text[],
?::int[], ?::text[], ?::text[], ?::int[], ?::text[], ?::int[], ?::bigint[], ?::bigint[])
AS e(` + historyColumns + `, key)`

// pgHistoryColumns are a transaction's entries as PostgreSQL's history
// INSERT takes them: one array a column, in historyColumns' order, then
// each entry's key (0: its row's, which the INSERT reads). The writer's
// batch sends them as binary arrays built in one buffer
// (pgBatch.queueArrays): pgx would box every element in an interface, and
// as text the server would parse every element (a timestamp's text costs
// it about a microsecond). On the slow path pgx encodes the same slices.
type pgHistoryColumns struct {
	chain, prevHash, hash, guid                  []string
	stateBefore, rspBefore, stateAfter, rspAfter []string
	command, host, reason                        []string
	seq, tookUS, key                             []int64
	attempts, pid, httpStatus                    []int32
	at                                           []time.Time
}

// insert is the INSERT of es (their keys from ps; nil: every entry's
// row's), its arguments in args' room and c's: valid until c's next use.
func (c *pgHistoryColumns) insert(es []Entry, ps []pending, args []any) histStmt {
	texts := [...]*[]string{&c.chain, &c.prevHash, &c.hash, &c.guid, &c.stateBefore, &c.rspBefore, &c.stateAfter, &c.rspAfter, &c.command, &c.host, &c.reason}
	for _, t := range texts {
		clear(*t) // the last transaction's strings are not kept alive
		*t = (*t)[:0]
	}
	c.seq, c.tookUS, c.key = c.seq[:0], c.tookUS[:0], c.key[:0]
	c.attempts, c.pid, c.httpStatus, c.at = c.attempts[:0], c.pid[:0], c.httpStatus[:0], c.at[:0]
	for i := range es {
		e := &es[i]
		c.chain = append(c.chain, e.Chain)
		c.seq = append(c.seq, e.Seq)
		c.prevHash = append(c.prevHash, e.PrevHash)
		c.hash = append(c.hash, e.Hash)
		c.guid = append(c.guid, e.GUID)
		c.at = append(c.at, e.At)
		c.stateBefore = append(c.stateBefore, string(e.StateBefore))
		c.rspBefore = append(c.rspBefore, e.RspBefore)
		c.stateAfter = append(c.stateAfter, string(e.StateAfter))
		c.rspAfter = append(c.rspAfter, e.RspAfter)
		c.attempts = append(c.attempts, int32(e.Attempts))
		c.command = append(c.command, e.Command)
		c.host = append(c.host, e.Host)
		c.pid = append(c.pid, int32(e.PID))
		c.reason = append(c.reason, e.Reason)
		c.httpStatus = append(c.httpStatus, int32(e.HTTPStatus))
		c.tookUS = append(c.tookUS, e.Took.Microseconds())
		c.key = append(c.key, keyOf(ps, i))
	}
	args = append(args, &c.chain, &c.seq, &c.prevHash, &c.hash, &c.guid, &c.at, &c.stateBefore, &c.rspBefore, &c.stateAfter, &c.rspAfter,
		&c.attempts, &c.command, &c.host, &c.pid, &c.reason, &c.httpStatus, &c.tookUS, &c.key)
	return histStmt{sqlPgHistoryInsert, args}
}

// pgHistoryArgs is how many arguments sqlPgHistoryInsert takes.
const pgHistoryArgs = 18

// keyOf is the key of entry i that ps give (0: its row's).
func keyOf(ps []pending, i int) int64 {
	if ps == nil {
		return 0
	}
	return ps[i].key
}

// statements are what a store's writer runs to append a transaction's
// entries and move the chain's head, after the operations' own statements
// and before the COMMIT.
//
// They are made in the writer's room (c.room): valid until the next
// transaction's.
func (c *chain) statements(d *dialect, es []Entry, ps []pending, head ChainHead) []histStmt {
	sc := &c.room
	qs := sc.inserts(d, es, ps)
	chainArg := c.actorArgs[0]
	if head.Chain != c.actor.Instance { // never: a head is its chain's
		chainArg = head.Chain
	}
	args := append(sc.take(7), chainArg, c.actorArgs[1], c.actorArgs[2], c.actorArgs[3], d.atArg(time.Now()), head.Seq, sc.bx.str(head.Hash))
	qs = append(qs, histStmt{sqlChainUpsert, args})
	sc.qs = qs
	return qs
}

// histStmt is one statement with its arguments.
type histStmt struct {
	q    string
	args []any
}

// reloadHead reads the chain's head from the database (after a COMMIT whose
// outcome was unknown, or at the first transaction), inside the writer's
// transaction.
func (c *chain) reloadHead(read func(q string, args ...any) scanner) error {
	var seq nullInt
	var hash nullString
	err := read(sqlChainHead, c.actor.Instance).Scan(&seq, &hash)
	if err != nil && !errors.Is(err, errNoRows) {
		return fmt.Errorf("read history chain head: %w", err)
	}
	c.advance(&ChainHead{Chain: c.actor.Instance, Seq: seq.Int64, Hash: hash.String})
	return nil
}

// ChainHead is the head of the history chain this Ledger writes: its
// instance, the last entry's sequence number and hash (0 and "" before the
// first). Publishing it (the relay logs it and exports it as a metric)
// anchors the chain outside the database.
func (l *Ledger) ChainHead() ChainHead { return l.chain.current() }

// Actor is who this Ledger's history entries name.
func (l *Ledger) Actor() Actor { return l.chain.actor }
