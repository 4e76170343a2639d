package ledger

import (
	"context"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/testkit"
)

// A ledger opened read-only refuses writes: ours (ErrReadOnly, before any
// statement) and, should a statement of ours try, the database's.
func TestOpenReadOnly(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		rw := openLedger(t, db)
		guid := testkit.GUID()
		seed(t, rw, request(txTransfer, guid, sentAt1, bodyA), StateDone, codeOK)

		l, err := OpenReadOnly(db)
		assert.NilError(t, err)
		defer l.Close()
		r, err := l.Get(ctx, guid)
		assert.NilError(t, err)
		assert.Check(t, is.Equal(r.State, StateDone))
		_, err = l.Claim(ctx, request(txTransfer, testkit.GUID(), sentAt1, bodyA))
		assert.Check(t, is.ErrorIs(err, ErrReadOnly))
		_, err = l.PurgeDone(ctx, time.Hour, false, "test")
		assert.Check(t, is.ErrorIs(err, ErrReadOnly))
		assert.Check(t, l.Ping(ctx))

		// The database's own refusal, below our guard.
		var g string
		err = l.st.read().queryRow(ctx, `INSERT INTO tx(guid) VALUES ('x') RETURNING guid`).Scan(&g)
		assert.Assert(t, err != nil, "a read-only ledger wrote a row")
		msg := strings.ToLower(err.Error())
		assert.Check(t, strings.Contains(msg, "read-only") || strings.Contains(msg, "readonly"), "%v", err)
		assert.NilError(t, l.Close())
	})
}

// A missing file is not created by a read-only open.
func TestOpenReadOnlyMissing(t *testing.T) {
	_, err := OpenReadOnly(dbPath(t))
	assert.Check(t, is.ErrorContains(err, "missing"))
}

// Page reads keyset pages in List's order, on both stores; SearchGUIDs
// finds rows by prefix, and purged GUIDs by their history.
func TestPageAndSearch(t *testing.T) {
	eachStore(t, func(t *testing.T, l *Ledger) {
		ctx := context.Background()
		var guids []string
		for range 7 {
			g := testkit.GUID()
			guids = append(guids, g)
			seed(t, l, request(txTransfer, g, sentAt1, bodyA), StateUnknown, codeTimeout)
		}
		f := Filter{States: []State{StateUnknown}}
		var got []string
		var c Cursor
		for {
			page, err := l.Page(ctx, f, c, 3)
			assert.NilError(t, err)
			for _, r := range page {
				got = append(got, r.GUID)
			}
			if len(page) < 3 {
				break
			}
			c = After(page[len(page)-1])
		}
		all, err := l.List(ctx, f)
		assert.NilError(t, err)
		var want []string
		for _, r := range all {
			want = append(want, r.GUID)
		}
		assert.DeepEqual(t, got, want)
		assert.Check(t, is.Len(got, 7))

		m, err := l.SearchGUIDs(ctx, guids[0][:30], 100)
		assert.NilError(t, err)
		assert.Check(t, len(m) >= 1 && m[0].GUID <= guids[0])
		_, err = l.SearchGUIDs(ctx, "XYZ", 10)
		assert.Check(t, is.ErrorContains(err, "not lowercase hex"))

		// A purged row is found by its history.
		gone := testkit.GUID()
		seed(t, l, request(txTransfer, gone, sentAt1, bodyA), StateDone, codeOK)
		setUpdatedAt(t, l, gone, time.Now().Add(-48*time.Hour))
		n, err := l.PurgeDone(ctx, 24*time.Hour, false, "purged after 1 day")
		assert.NilError(t, err)
		assert.Check(t, is.Equal(n, int64(1)))
		m, err = l.SearchGUIDs(ctx, gone, 10)
		assert.NilError(t, err)
		assert.Check(t, is.DeepEqual(m, []GUIDMatch{{GUID: gone, Purged: true}}))
	})
}

// CheckEntries sees an entry edited in place.
func TestCheckEntries(t *testing.T) {
	eachStore(t, func(t *testing.T, l *Ledger) {
		ctx := context.Background()
		guid := testkit.GUID()
		seed(t, l, request(txTransfer, guid, sentAt1, bodyA), StateDone, codeOK)
		es, err := l.History(ctx, guid)
		assert.NilError(t, err)
		cs, err := l.CheckEntries(ctx, es)
		assert.NilError(t, err)
		assert.Assert(t, is.Len(cs, 2))
		for _, c := range cs {
			assert.Check(t, c.OK(), "%+v", c)
		}
		raw(t, l).Exec(`UPDATE history SET reason = 'edited' WHERE guid = ? AND seq = ?`, guid, es[1].Seq)
		es, err = l.History(ctx, guid)
		assert.NilError(t, err)
		cs, err = l.CheckEntries(ctx, es)
		assert.NilError(t, err)
		assert.Check(t, cs[0].OK())
		assert.Check(t, !cs[1].Hash && is.Contains(cs[1].Why, "edited")().Success())
	})
}

// Audit lists the conflict entries: they verify, and ask for a person.
func TestAuditListsConflicts(t *testing.T) {
	l := newLedger(t)
	ctx := context.Background()
	settled := Outcome{State: StateFailed, RspCode: codeNoConnect, Why: Why{Reason: "stale SENT, lookup 404: never posted", HTTPStatus: 404}}
	conflict := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
	_, err := l.Claim(ctx, conflict)
	assert.NilError(t, err)
	assert.NilError(t, l.Transition(ctx, conflict.GUID, StateSent, settled))
	_, err = l.Claim(ctx, conflict)
	assert.NilError(t, err)
	err = l.Finish(ctx, conflict.GUID, 1, Outcome{State: StateDone, RspCode: codeOK, Response: responseFrame(conflict.GUID, codeOK), Why: Why{Reason: "core answered HTTP 200"}})
	assert.Check(t, is.ErrorIs(err, ErrReclaimed))
	seed(t, l, request(txTransfer, testkit.GUID(), sentAt1, bodyA), StateDone, codeOK)

	sum, err := l.Audit(ctx)
	assert.NilError(t, err)
	assert.Check(t, is.Equal(sum.ConflictCount, int64(1)))
	assert.Assert(t, is.Len(sum.Conflicts, 1))
	assert.Check(t, is.Equal(sum.Conflicts[0].GUID, conflict.GUID))
	assert.Check(t, strings.HasPrefix(sum.Conflicts[0].Reason, ConflictReason))
}
