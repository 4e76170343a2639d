package ledger

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/testkit"
)

// change is what a history entry says about a row, for comparing.
type change struct {
	Before, After State
	RspB, RspA    string
	Attempts      int
	Reason        string
}

func changesOf(es []Entry) []change {
	out := make([]change, len(es))
	for i, e := range es {
		out[i] = change{e.StateBefore, e.StateAfter, e.RspBefore, e.RspAfter, e.Attempts, e.Reason}
	}
	return out
}

func history(t *testing.T, l *Ledger, guid string) []Entry {
	t.Helper()
	es, err := l.History(context.Background(), guid)
	assert.NilError(t, err)
	return es
}

func mustAudit(t *testing.T, l *Ledger) AuditSummary {
	t.Helper()
	s, err := l.Audit(context.Background())
	assert.NilError(t, err)
	return s
}

// TestHistoryOfEveryTransition: each change of a row writes exactly one
// entry with the state and code before and after, the attempts, the actor
// and the reason; what changes nothing (a replay, a refused transition)
// writes none.
func TestHistoryOfEveryTransition(t *testing.T) {
	actor := Actor{Command: "relay", Host: "host-a", PID: 4242, Instance: "relay-test-1"}
	eachStore(t, func(t *testing.T, l *Ledger) {
		ctx := context.Background()
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		_, err := l.Claim(ctx, r)
		assert.NilError(t, err)
		assert.NilError(t, l.Finish(ctx, r.GUID, 1, Outcome{State: StateFailed, RspCode: codeNoConnect,
			Why: Why{Reason: "core not reached: connection refused"}}))
		c, err := l.Claim(ctx, r) // the channel's resend re-claims it
		assert.NilError(t, err)
		assert.Equal(t, c.Outcome, Owned)
		assert.NilError(t, l.Finish(ctx, r.GUID, c.Attempts, Outcome{State: StateUnknown, RspCode: codeTimeout,
			Why: Why{Reason: "core call timed out", Took: 1500 * time.Millisecond}}))
		// Refused: the row is UNKNOWN, not SENT. No entry.
		err = l.Finish(ctx, r.GUID, c.Attempts, Outcome{State: StateDone, RspCode: codeOK, Response: responseFrame(r.GUID, codeOK), Why: Why{Reason: "late"}})
		assert.Check(t, errors.Is(err, ErrStateChanged))
		assert.NilError(t, l.Transition(ctx, r.GUID, StateUnknown, Outcome{State: StateDone, RspCode: codeOK,
			Response: responseFrame(r.GUID, codeOK), Why: Why{Reason: "lookup 200", HTTPStatus: 200, Took: 3 * time.Millisecond}}))
		c, err = l.Claim(ctx, r) // a replay changes nothing
		assert.NilError(t, err)
		assert.Equal(t, c.Outcome, Replay)
		setUpdatedAt(t, l, r.GUID, time.Now().Add(-48*time.Hour))
		n, err := l.PurgeDone(ctx, 24*time.Hour, false, "purged after 1 days")
		assert.NilError(t, err)
		assert.Equal(t, n, int64(1))

		// reprocess's re-claim of another row
		r2 := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		seed(t, l, r2, StateFailed, codeNoConnect)
		_, err = l.ReclaimBelow(ctx, r2.GUID, 1) // at the limit: refused, no entry
		assert.Check(t, errors.Is(err, ErrStateChanged))
		a, err := l.ReclaimBelow(ctx, r2.GUID, 3)
		assert.NilError(t, err)
		assert.Equal(t, a, 2)

		es := history(t, l, r.GUID)
		assert.DeepEqual(t, changesOf(es), []change{
			{"", StateSent, "", "", 1, reasonClaimed},
			{StateSent, StateFailed, "", codeNoConnect, 1, "core not reached: connection refused"},
			{StateFailed, StateSent, codeNoConnect, codeNoConnect, 2, reasonReclaimed},
			{StateSent, StateUnknown, codeNoConnect, codeTimeout, 2, "core call timed out"},
			{StateUnknown, StateDone, codeTimeout, codeOK, 2, "lookup 200"},
			{StateDone, "", codeOK, "", 2, "purged after 1 days"},
		})
		for i, e := range es {
			assert.Check(t, is.Equal(e.Chain, actor.Instance))
			assert.Check(t, is.Equal(e.Command, actor.Command))
			assert.Check(t, is.Equal(e.Host, actor.Host))
			assert.Check(t, is.Equal(e.PID, actor.PID))
			assert.Check(t, is.Equal(e.GUID, r.GUID))
			assert.Check(t, time.Since(e.At) < time.Minute && time.Since(e.At) > -time.Minute, "entry %d at %v", i, e.At)
			if i > 0 {
				assert.Check(t, !e.At.Before(es[i-1].At), "entry %d is older than the one before", i)
			}
		}
		assert.Equal(t, es[3].Took, 1500*time.Millisecond)
		assert.Equal(t, es[4].HTTPStatus, 200)
		assert.Equal(t, es[4].Took, 3*time.Millisecond)

		assert.DeepEqual(t, changesOf(history(t, l, r2.GUID)), []change{
			{"", StateSent, "", "", 1, reasonClaimed},
			{StateSent, StateFailed, "", codeNoConnect, 1, "test"},
			{StateFailed, StateSent, codeNoConnect, codeNoConnect, 2, "re-claimed to resend (attempts below 3)"},
		})
		s := mustAudit(t, l)
		assert.Equal(t, s.Chains, 1)
		assert.Equal(t, s.Entries, int64(9))
		assert.Equal(t, l.ChainHead().Seq, int64(9))
	}, WithActor(actor))
}

// TestHistoryNeedsAReason: an outcome without a reason is refused and
// changes nothing.
func TestHistoryNeedsAReason(t *testing.T) {
	l := newLedger(t)
	ctx := context.Background()
	r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	_, err := l.Claim(ctx, r)
	assert.NilError(t, err)
	err = l.Finish(ctx, r.GUID, 1, Outcome{State: StateFailed, RspCode: codeNoConnect})
	assert.ErrorContains(t, err, "no reason")
	row, err := l.Get(ctx, r.GUID)
	assert.NilError(t, err)
	assert.Equal(t, row.State, StateSent)
	assert.Equal(t, len(history(t, l, r.GUID)), 1)
}

// TestHistoryInTheSameTransaction: a change whose entry cannot be written
// does not happen, and an entry whose change fails is not written; the
// other operations of the same batch commit with their entries. The store
// is made to fail in between by a trigger.
func TestHistoryInTheSameTransaction(t *testing.T) {
	eachStore(t, func(t *testing.T, l *Ledger) {
		ctx := context.Background()
		rw := raw(t, l)
		noEntry, noChange, good := request(txTransfer, testkit.GUID(), sentAt1, bodyA), request(txTransfer, testkit.GUID(), sentAt1, bodyA), request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		for _, r := range []Request{noEntry, noChange, good} {
			_, err := l.Claim(ctx, r)
			assert.NilError(t, err)
		}
		if rw.Postgres() {
			rw.Exec(`CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$`)
			rw.Exec(`CREATE TRIGGER refuse_entry BEFORE INSERT ON history FOR EACH ROW WHEN (NEW.guid = '` + noEntry.GUID + `') EXECUTE FUNCTION refuse()`)
			rw.Exec(`CREATE TRIGGER refuse_change BEFORE UPDATE ON tx FOR EACH ROW WHEN (NEW.guid = '` + noChange.GUID + `') EXECUTE FUNCTION refuse()`)
		} else {
			rw.Exec(`CREATE TRIGGER refuse_entry BEFORE INSERT ON history WHEN NEW.guid = '` + noEntry.GUID + `' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`)
			rw.Exec(`CREATE TRIGGER refuse_change BEFORE UPDATE ON tx WHEN NEW.guid = '` + noChange.GUID + `' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`)
		}
		release := blockWriter(t, l)
		errs := make(map[string]chan error)
		for _, r := range []Request{noEntry, noChange, good} {
			ch := make(chan error, 1)
			errs[r.GUID] = ch
			go func() {
				ch <- l.Finish(ctx, r.GUID, 1, Outcome{State: StateDone, RspCode: codeOK, Response: responseFrame(r.GUID, codeOK), Why: Why{Reason: "core answered HTTP 200", HTTPStatus: 200}})
			}()
		}
		waitQueued(t, l, 3)
		release()
		for _, r := range []Request{noEntry, noChange} {
			err := <-errs[r.GUID]
			assert.ErrorContains(t, err, "refused by the test")
			row, err := l.Get(ctx, r.GUID)
			assert.NilError(t, err)
			assert.Equal(t, row.State, StateSent, "the change whose entry failed was undone")
			assert.Equal(t, len(history(t, l, r.GUID)), 1, "only the claim's entry")
		}
		assert.NilError(t, <-errs[good.GUID])
		assert.DeepEqual(t, changesOf(history(t, l, good.GUID)), []change{
			{"", StateSent, "", "", 1, reasonClaimed},
			{StateSent, StateDone, "", codeOK, 1, "core answered HTTP 200"},
		})
		mustAudit(t, l)
	})
}

// tamper is one way of altering a chain of entries 1..n outside the
// ledger, and the first entry Audit must name.
type tamper struct {
	name    string
	do      func(rw *testkit.Raw, chain string, n int64)
	seq     func(n int64) int64
	because string
}

var tampers = []tamper{
	{"reason edited", func(rw *testkit.Raw, c string, n int64) {
		rw.Exec(`UPDATE history SET reason = 'core answered HTTP 404' WHERE chain = ? AND seq = 3`, c)
	}, func(int64) int64 { return 3 }, "edited"},
	{"entry deleted", func(rw *testkit.Raw, c string, n int64) {
		rw.Exec(`DELETE FROM history WHERE chain = ? AND seq = 2`, c)
	}, func(int64) int64 { return 2 }, "missing"},
	{"entry inserted", func(rw *testkit.Raw, c string, n int64) {
		rw.Exec(`INSERT INTO history(`+historyColumns+`) SELECT chain, seq + 1, hash, hash, guid, at, state_before, rsp_before,
state_after, rsp_after, attempts, command, host, pid, reason, http_status, took_us FROM history WHERE chain = ? AND seq = ?`, c, n)
	}, func(n int64) int64 { return n + 1 }, "inserted"},
	{"entries swapped", func(rw *testkit.Raw, c string, n int64) {
		rw.Exec(`UPDATE history SET seq = -1 WHERE chain = ? AND seq = 2`, c)
		rw.Exec(`UPDATE history SET seq = 2 WHERE chain = ? AND seq = 3`, c)
		rw.Exec(`UPDATE history SET seq = 3 WHERE chain = ? AND seq = -1`, c)
	}, func(int64) int64 { return 2 }, "does not link"},
	{"chain's head removed", func(rw *testkit.Raw, c string, n int64) {
		rw.Exec(`DELETE FROM history WHERE chain = ? AND seq = ?`, c, n)
	}, func(n int64) int64 { return n }, "last entries removed"},
	{"chain's head record removed", func(rw *testkit.Raw, c string, n int64) {
		rw.Exec(`DELETE FROM history_chain WHERE chain = ?`, c)
	}, func(int64) int64 { return 0 }, "no head"},
	// The key is not hashed: an entry whose key no longer leads to it
	// would vanish from its GUID's history without breaking a chain.
	{"entry's key changed", func(rw *testkit.Raw, c string, n int64) {
		rw.Exec(`UPDATE history SET hist_key = hist_key + 1 WHERE chain = ? AND seq = 3`, c)
	}, func(int64) int64 { return 3 }, "cannot be found"},
	{"row's key changed", func(rw *testkit.Raw, c string, n int64) {
		rw.Exec(`UPDATE tx SET hist_key = hist_key + 1 WHERE guid = (SELECT guid FROM history WHERE chain = ? AND seq = 5)`, c)
	}, func(int64) int64 { return 5 }, "cannot be found"},
}

// TestAuditDetectsTampering: Audit passes on an untouched history and
// names the first entry that fails after each kind of tampering.
func TestAuditDetectsTampering(t *testing.T) {
	for _, tc := range tampers {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			eachStore(t, func(t *testing.T, l *Ledger) {
				ctx := context.Background()
				for range 3 {
					seed(t, l, request(txTransfer, testkit.GUID(), sentAt1, bodyA), StateDone, codeOK)
				}
				head := l.ChainHead()
				assert.Equal(t, head.Seq, int64(6))
				s := mustAudit(t, l)
				assert.Equal(t, s.Entries, int64(6))
				var seqs []int64
				assert.NilError(t, l.ScanChain(ctx, head.Chain, func(e Entry) error {
					assert.Check(t, e.Verify())
					seqs = append(seqs, e.Seq)
					return nil
				}))
				assert.DeepEqual(t, seqs, []int64{1, 2, 3, 4, 5, 6})

				tc.do(raw(t, l), head.Chain, head.Seq)
				_, err := l.Audit(ctx)
				var ae *AuditError
				assert.Assert(t, errors.As(err, &ae), "%v", err)
				assert.Check(t, errors.Is(err, ErrAudit))
				assert.Equal(t, ae.Chain, head.Chain)
				assert.Equal(t, ae.Seq, tc.seq(head.Seq), "%v", err)
				assert.Check(t, is.Contains(ae.Why, tc.because))
			})
		})
	}
}

// TestPurgeHistory: purging rows leaves their history; purging history
// removes the old entries, moves each chain's cut so the rest still
// verifies, and records that it did.
func TestPurgeHistory(t *testing.T) {
	eachStore(t, func(t *testing.T, l *Ledger) {
		ctx := context.Background()
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		seed(t, l, r, StateDone, codeOK)
		assert.Equal(t, len(history(t, l, r.GUID)), 2)
		// Everything written so far is made 401 days old (ages are the
		// database's: its clock cannot be moved). Its hashes no longer
		// match, which does not matter: the purge removes it all.
		before := l.ChainHead()
		rw := raw(t, l)
		old := time.Now().Add(-401 * 24 * time.Hour).UTC()
		if rw.Postgres() {
			rw.Exec(`UPDATE history SET at = ?`, old)
		} else {
			rw.Exec(`UPDATE history SET at = ?`, old.Format(atLayout))
		}
		n, err := l.PurgeHistory(ctx, 400*24*time.Hour, "history purged after 400 days")
		assert.NilError(t, err)
		assert.Equal(t, n, before.Seq)
		assert.Equal(t, len(history(t, l, r.GUID)), 0)
		chains, err := l.Chains(ctx)
		assert.NilError(t, err)
		assert.Equal(t, len(chains), 1)
		assert.Equal(t, chains[0].CutSeq, before.Seq)
		assert.Equal(t, chains[0].CutHash, before.Hash)
		notes := history(t, l, "")
		assert.Equal(t, len(notes), 1)
		assert.Check(t, is.Contains(notes[0].Reason, fmt.Sprintf("history purged after 400 days: history of chain %s entries 1 to %d removed", before.Chain, before.Seq)))
		s := mustAudit(t, l)
		assert.Equal(t, s.Entries, int64(1))

		// New entries go on after the cut and verify.
		seed(t, l, request(txTransfer, testkit.GUID(), sentAt1, bodyA), StateDone, codeOK)
		mustAudit(t, l)
		// Nothing older than a cut in the past: nothing removed.
		n, err = l.PurgeHistory(ctx, 400*24*time.Hour, "history purged after 400 days")
		assert.NilError(t, err)
		assert.Equal(t, n, int64(0))
	})
}

// TestHistoryMigration: a ledger made with an older schema version is
// brought to the current one on Open: from version 1 it gains the
// history, from version 2 the history's keys (its entries without one are
// still found); its rows keep working and their changes from then on have
// entries, found by GUID.
func TestHistoryMigration(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			testkit.EachStore(t, func(t *testing.T, db string) {
				ctx := context.Background()
				if !IsURL(db) {
					rawDBMode(t, db, "rwc").Exec(`PRAGMA user_version = 0`) // creates the file
				}
				rw := testkit.OpenRaw(t, db, IsURL(db))
				file := fmt.Sprintf("testdata/schema_v%d.sql", version)
				if rw.Postgres() {
					file = fmt.Sprintf("testdata/schema_postgres_v%d.sql", version)
				}
				schema, err := os.ReadFile(file)
				assert.NilError(t, err)
				if rw.Postgres() {
					for _, stmt := range strings.Split(string(schema), ";\n") {
						if strings.TrimSpace(stripComments(stmt)) != "" {
							rw.Exec(stmt)
						}
					}
				} else {
					rw.Exec(string(schema))
				}
				r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
				rw.Exec(`INSERT INTO tx(guid, tx_code, state, rsp_code, request, response, attempts, updated_at) VALUES (?, ?, 'UNKNOWN', ?, ?, NULL, 1, `+rw.Now()+`)`,
					r.GUID, r.TxCode, codeTimeout, r.Frame)
				before := []change{}
				if version == 2 {
					// The entry a version 2 relay wrote when the call's
					// answer never came, in a chain of its own.
					e := Entry{Chain: "relay-v2", Seq: 1, GUID: r.GUID, At: time.Now().UTC().Truncate(time.Microsecond),
						StateBefore: StateSent, StateAfter: StateUnknown, RspAfter: codeTimeout, Attempts: 1,
						Command: "relay", Host: "old", PID: 1, Why: Why{Reason: "no answer"}}
					e.Hash = entryHash(&e)
					at := any(e.At)
					if !rw.Postgres() {
						at = e.At.Format(atLayout)
					}
					rw.Exec(`INSERT INTO history(`+historyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
						e.Chain, e.Seq, e.PrevHash, e.Hash, e.GUID, at, string(e.StateBefore), e.RspBefore, string(e.StateAfter), e.RspAfter,
						e.Attempts, e.Command, e.Host, e.PID, e.Reason, 0, 0)
					rw.Exec(`INSERT INTO history_chain(chain, command, host, pid, started_at, head_seq, head_hash) VALUES (?, 'relay', 'old', 1, ?, 1, ?)`,
						e.Chain, at, e.Hash)
					before = changesOf([]Entry{e})
				}

				l := openLedger(t, db)
				var v int
				assert.NilError(t, rw.QueryRow(`SELECT MAX(version) FROM schema_version`, nil, &v))
				assert.Equal(t, v, SchemaVersion)
				assert.DeepEqual(t, changesOf(history(t, l, r.GUID)), before)
				assert.NilError(t, l.Transition(ctx, r.GUID, StateUnknown, Outcome{State: StateFailed, RspCode: codeNoConnect, Why: Why{Reason: "lookup 404", HTTPStatus: 404}}))
				assert.DeepEqual(t, changesOf(history(t, l, r.GUID)), append(before,
					change{StateUnknown, StateFailed, codeTimeout, codeNoConnect, 1, "lookup 404"},
				))
				mustAudit(t, l)

				// A row claimed from now on has a key, and so have its
				// entries.
				fresh := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
				seed(t, l, fresh, StateDone, codeOK)
				assert.Equal(t, len(history(t, l, fresh.GUID)), 2)
				var unkeyed int
				assert.NilError(t, rw.QueryRow(`SELECT COUNT(*) FROM history WHERE guid = ? AND hist_key IS NULL`, []any{fresh.GUID}, &unkeyed))
				assert.Equal(t, unkeyed, 0)
				mustAudit(t, l)
			})
		})
	}
}

// TestHistoryFoundByKey: a GUID's entries are found through its row's
// key (schema.sql, version 3) while the row lives, through its purge's
// entry once it is gone, and both after the GUID is claimed again; no
// entry of a row that has a key goes into the index on GUIDs.
func TestHistoryFoundByKey(t *testing.T) {
	eachStore(t, func(t *testing.T, l *Ledger) {
		ctx := context.Background()
		rw := raw(t, l)
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		other := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		seed(t, l, r, StateDone, codeOK)
		seed(t, l, other, StateDone, codeOK)
		claimed := change{"", StateSent, "", "", 1, reasonClaimed}
		done := change{StateSent, StateDone, "", codeOK, 1, "test"}
		assert.DeepEqual(t, changesOf(history(t, l, r.GUID)), []change{claimed, done})

		var inGUIDIndex int
		assert.NilError(t, rw.QueryRow(`SELECT COUNT(*) FROM history WHERE hist_key IS NULL OR state_after = ''`, nil, &inGUIDIndex))
		assert.Equal(t, inGUIDIndex, 0)

		rw.SetUpdatedAt(r.GUID, time.Now().Add(-48*time.Hour))
		n, err := l.PurgeDone(ctx, 24*time.Hour, false, "purged after 1 day")
		assert.NilError(t, err)
		assert.Equal(t, n, int64(1))
		purged := change{StateDone, "", codeOK, "", 1, "purged after 1 day"}
		assert.DeepEqual(t, changesOf(history(t, l, r.GUID)), []change{claimed, done, purged})

		// Claimed again: a new row, with a new key.
		seed(t, l, r, StateDone, codeOK)
		assert.DeepEqual(t, changesOf(history(t, l, r.GUID)), []change{claimed, done, purged, claimed, done})
		assert.DeepEqual(t, changesOf(history(t, l, other.GUID)), []change{claimed, done})
		mustAudit(t, l)
	})
}

// TestHistoryLookupSearchesIndexes: on SQLite, reading a GUID's entries
// searches indexes, never scans the history, and no index on the GUID is
// left that every entry writes into.
func TestHistoryLookupSearchesIndexes(t *testing.T) {
	l := openLedger(t, filepath.Join(t.TempDir(), "ledger.db"))
	rw := raw(t, l)
	var names string
	assert.NilError(t, rw.QueryRow(`SELECT group_concat(name, ' ') FROM (SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'history' AND sql IS NOT NULL ORDER BY name)`, nil, &names))
	assert.Equal(t, names, "history_guid_unkeyed history_key")

	all := strings.Join(queryPlan(t, rawDB(t, l.Path()), sqlHistoryOf, "g", "g", "g", "g"), "\n")
	assert.Check(t, !strings.Contains(all, "SCAN history"), all)
	assert.Check(t, is.Contains(all, "USING INDEX history_guid_unkeyed"))
	assert.Check(t, is.Contains(all, "USING INDEX history_key"))
}

func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// TestAuditOnABusyLedger: three relays and a settling batch command share
// one ledger and change the same GUIDs at once; then every chain verifies,
// and each GUID's entries follow one another (each starts where the one
// before ended), whoever wrote them.
func TestAuditOnABusyLedger(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		var relays []*Ledger
		for i := range 3 {
			relays = append(relays, openLedger(t, db, WithActor(Actor{Command: "relay", Host: fmt.Sprintf("host-%d", i), PID: 100 + i, Instance: fmt.Sprintf("relay-busy-%d", i)})))
		}
		batch := openLedger(t, db, WithActor(NewActor("resolve")))
		const guids = 60
		reqs := make([]Request, guids)
		for i := range reqs {
			reqs[i] = request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		}
		var wg sync.WaitGroup
		for i, l := range relays {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for round := range 3 {
					for j, r := range reqs {
						c, err := l.Claim(ctx, r)
						if err != nil || c.Outcome != Owned {
							continue
						}
						// E902 for most, so that the others re-claim; E901 for some
						// (then the batch settles them); DONE at last.
						o := Outcome{State: StateFailed, RspCode: codeNoConnect, Why: Why{Reason: "core not reached"}}
						switch {
						case round == 2:
							o = Outcome{State: StateDone, RspCode: codeOK, Response: responseFrame(r.GUID, codeOK), Why: Why{Reason: "core answered HTTP 200", HTTPStatus: 200}}
						case (i+j)%5 == 0:
							o = Outcome{State: StateUnknown, RspCode: codeTimeout, Why: Why{Reason: "core call timed out"}}
						}
						if err := l.Finish(ctx, r.GUID, c.Attempts, o); err != nil {
							t.Errorf("finish %s: %v", r.GUID, err)
						}
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				for _, r := range reqs {
					err := batch.Transition(ctx, r.GUID, StateUnknown, Outcome{State: StateFailed, RspCode: codeNoConnect, Why: Why{Reason: "lookup 404", HTTPStatus: 404}})
					if err != nil && !errors.Is(err, ErrStateChanged) {
						t.Errorf("transition %s: %v", r.GUID, err)
					}
				}
			}
		}()
		wg.Wait()
		for _, r := range reqs { // what is still UNKNOWN
			err := batch.Transition(ctx, r.GUID, StateUnknown, Outcome{State: StateFailed, RspCode: codeNoConnect, Why: Why{Reason: "lookup 404", HTTPStatus: 404}})
			assert.Check(t, err == nil || errors.Is(err, ErrStateChanged), "%v", err)
		}

		s := mustAudit(t, batch)
		var total int64
		writers := map[string]bool{}
		for _, r := range reqs {
			es := history(t, batch, r.GUID)
			total += int64(len(es))
			for _, e := range es {
				writers[e.Chain] = true
			}
			assert.Assert(t, len(es) > 0)
			assert.Equal(t, es[0].StateBefore, State(""))
			for k := 1; k < len(es); k++ {
				prev, e := es[k-1], es[k]
				assert.Check(t, e.StateBefore == prev.StateAfter && e.RspBefore == prev.RspAfter,
					"%s entry %d (%s %s/%s→%s/%s) does not follow %s/%s", r.GUID, k, e.Chain, e.StateBefore, e.RspBefore, e.StateAfter, e.RspAfter, prev.StateAfter, prev.RspAfter)
			}
			row, err := batch.Get(ctx, r.GUID)
			assert.NilError(t, err)
			last := es[len(es)-1]
			assert.Check(t, last.StateAfter == row.State && last.RspAfter == row.RspCode && last.Attempts == row.Attempts, "%s: last entry %+v, row %+v", r.GUID, last, row)
		}
		assert.Equal(t, s.Entries, total)
		assert.Equal(t, s.Chains, len(writers))
		assert.Check(t, len(writers) >= 2, "only %v wrote", writers)
	})
}

// TestNoChangeOfTxWithoutHistory: a statement writing tx rows through exec
// (which writes no entry) is refused; only change may write them.
func TestNoChangeOfTxWithoutHistory(t *testing.T) {
	eachStore(t, func(t *testing.T, l *Ledger) {
		for _, q := range []string{
			`INSERT INTO tx(guid, state) VALUES ('x', 'SENT')`,
			` update tx SET state = 'DONE'`,
			"DELETE\nFROM tx WHERE guid = 'x'",
		} {
			err := l.st.do(context.Background(), operation{run: opFunc(func(tx stmts) error {
				_, err := tx.exec(q)
				return err
			})})
			assert.ErrorContains(t, err, "must go through change", q)
		}
	})
}

// TestHistoryOfLateAnswersAndAbandonedClaims: the transitions of SPEC 6's
// late core answer and unconfirmed claim write their entries, and a late
// answer that finds the row re-claimed leaves a conflict entry on it
// without changing it.
func TestHistoryOfLateAnswersAndAbandonedClaims(t *testing.T) {
	eachStore(t, func(t *testing.T, l *Ledger) {
		ctx := context.Background()
		settled := Outcome{State: StateFailed, RspCode: codeNoConnect, Why: Why{Reason: "stale SENT, lookup 404: never posted", HTTPStatus: 404}}
		answered := func(g string) Outcome {
			return Outcome{State: StateDone, RspCode: codeOK, Response: responseFrame(g, codeOK), Why: Why{Reason: "core answered HTTP 200", HTTPStatus: 200}}
		}

		late := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		_, err := l.Claim(ctx, late)
		assert.NilError(t, err)
		assert.NilError(t, l.Transition(ctx, late.GUID, StateSent, settled))
		assert.NilError(t, l.Finish(ctx, late.GUID, 1, answered(late.GUID)))
		es := history(t, l, late.GUID)
		assert.DeepEqual(t, changesOf(es)[2], change{StateFailed, StateDone, codeNoConnect, codeOK, 1,
			"late answer, recorded over FAILED (settled while the call was under way): core answered HTTP 200"})

		conflict := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		_, err = l.Claim(ctx, conflict)
		assert.NilError(t, err)
		assert.NilError(t, l.Transition(ctx, conflict.GUID, StateSent, settled))
		c, err := l.Claim(ctx, conflict) // the channel's resend re-claims it
		assert.NilError(t, err)
		assert.Equal(t, c.Attempts, 2)
		err = l.Finish(ctx, conflict.GUID, 1, answered(conflict.GUID))
		assert.Check(t, errors.Is(err, ErrReclaimed), "%v", err)
		es = history(t, l, conflict.GUID)
		assert.Equal(t, len(es), 4)
		last := es[3]
		assert.Check(t, last.StateBefore == StateSent && last.StateAfter == StateSent && last.Attempts == 2, "%+v", last)
		assert.Check(t, is.Contains(last.Reason, "conflict: the core answered attempt 1 (0000: core answered HTTP 200) after the row was re-claimed (attempts 2)"))
		row, err := l.Get(ctx, conflict.GUID)
		assert.NilError(t, err)
		assert.Equal(t, row.State, StateSent, "the conflict changes nothing")

		abandoned := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		_, err = l.Claim(ctx, abandoned)
		assert.NilError(t, err)
		assert.NilError(t, l.AbandonClaim(ctx, abandoned.GUID, 1, tokenOf(t, l, abandoned.GUID), Outcome{State: StateFailed, RspCode: codeNoConnect,
			Why: Why{Reason: "claim's commit not confirmed by the database; the core was not called"}}))
		assert.DeepEqual(t, changesOf(history(t, l, abandoned.GUID))[1], change{StateSent, StateFailed, "", codeNoConnect, 1,
			"claim's commit not confirmed by the database; the core was not called"})
		mustAudit(t, l)
	})
}

// TestHistoryKeepsEveryCharacter: what an entry says is stored exactly as
// given, whatever characters it holds (quotes, backslashes, braces, commas,
// non-ASCII), in an entry alone and among others in one transaction, and
// the chain still verifies.
func TestHistoryKeepsEveryCharacter(t *testing.T) {
	actor := Actor{Command: `re"lay\`, Host: `host {a,b}`, PID: 7, Instance: `relay-"odd"\{1}`}
	eachStore(t, func(t *testing.T, l *Ledger) {
		ctx := context.Background()
		reasons := []string{`core said "no", \ then {x,y}`, `NULL`, ``, "é\t\u2028 ,}{\"\\", `\\"\"`}
		var rs []Request
		for range reasons {
			r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
			seed(t, l, r, StateSent, "")
			rs = append(rs, r)
		}
		var wg sync.WaitGroup
		for i, r := range rs {
			why := Why{Reason: reasons[i]}
			if why.Reason == "" {
				why.Reason = "empty is refused: " + reasons[0]
				reasons[i] = why.Reason
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				assert.Check(t, l.Finish(ctx, r.GUID, 1, Outcome{State: StateFailed, RspCode: codeNoConnect, Why: why}))
			}()
		}
		wg.Wait()
		for i, r := range rs {
			es := history(t, l, r.GUID)
			assert.Assert(t, is.Len(es, 2))
			assert.Check(t, is.Equal(es[1].Reason, reasons[i]))
			assert.Check(t, is.Equal(es[1].Command, actor.Command))
			assert.Check(t, is.Equal(es[1].Host, actor.Host))
			assert.Check(t, is.Equal(es[1].Chain, actor.Instance))
		}
		mustAudit(t, l)
	}, WithActor(actor))
}

// TestSQLiteHistoryInsertsInPowersOfTwo: a transaction's entries go in
// INSERTs of 32, 16, …, 1 rows, every entry exactly once and in order,
// in no more statements than the bits of their count (beyond 63, one
// more per 32).
func TestSQLiteHistoryInsertsInPowersOfTwo(t *testing.T) {
	for n := 0; n <= 100; n++ {
		es := make([]Entry, n)
		for i := range es {
			es[i] = Entry{Chain: "c", Seq: int64(i + 1), GUID: fmt.Sprint("g", i)}
		}
		qs := historyInserts(sqliteDialect, es, nil)
		seqs := []int64{}
		for _, q := range qs {
			rows := len(q.args) / historyArgs
			assert.Equal(t, len(q.args), rows*historyArgs)
			assert.Equal(t, q.q, sqlHistoryInserts[bits.Len(uint(rows))-1], "n=%d: %d rows", n, rows)
			for r := range rows {
				seqs = append(seqs, q.args[r*historyArgs+1].(int64))
			}
		}
		want := make([]int64, n)
		for i := range want {
			want[i] = int64(i + 1)
		}
		assert.DeepEqual(t, seqs, want)
		assert.Equal(t, len(qs), n/32+bits.OnesCount(uint(n%32)), "n=%d", n)
	}
}
