package console

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/ledger"
)

// A picture is drawn where several writers or a late answer took part,
// and only there.
func TestDraw(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	entry := func(chain, reason string, after ledger.State) entryView {
		e := ledger.Entry{Chain: chain, Command: "relay", At: at, StateAfter: after}
		e.Reason = reason
		at = at.Add(time.Second)
		return entryView{Entry: e, After: string(after), Late: lateOrConflict(e)}
	}
	one := []entryView{entry("relay-a", "claimed: new GUID", ledger.StateSent), entry("relay-a", "core answered HTTP 200", ledger.StateDone)}
	assert.Check(t, is.Nil(draw(one)))

	late := []entryView{entry("relay-a", "claimed: new GUID", ledger.StateSent), entry("relay-a", "stale SENT, lookup 404", ledger.StateFailed),
		entry("relay-a", "late answer, recorded over FAILED (settled while the call was under way): core answered HTTP 200", ledger.StateDone)}
	p := draw(late)
	assert.Assert(t, p != nil)
	assert.Check(t, is.Len(p.Lanes, 1))
	assert.Check(t, p.Dots[2].Late && !p.Dots[1].Late)

	two := []entryView{entry("relay-a", "claimed: new GUID", ledger.StateSent), entry("resolve-b", "lookup 200: posted", ledger.StateDone)}
	p = draw(two)
	assert.Assert(t, p != nil)
	assert.Check(t, is.Len(p.Lanes, 2))
	assert.Check(t, is.Len(p.Links, 1))
	assert.Check(t, p.Dots[0].Y != p.Dots[1].Y, "each writer its lane")
}
