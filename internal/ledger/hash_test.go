package ledger

import (
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// TestEntryHashIsStable pins the canonical encoding (SPEC 6b): entries
// written by any build verify in any other, so the hash of a given entry
// never changes. The long reason outgrows the encoder's stack buffer.
func TestEntryHashIsStable(t *testing.T) {
	e := Entry{
		Chain: "relay-00112233", Seq: 1234567, PrevHash: "ab", GUID: "dec0de00000000000000000000000001",
		At:          time.Date(2026, 12, 1, 16, 0, 0, 123456789, time.FixedZone("x", 3600)),
		StateBefore: StateSent, StateAfter: StateDone, RspAfter: codeOK,
		Attempts: 2, Command: "relay", Host: "héte", PID: 40123,
		Why: Why{Reason: "core answered HTTP 200", HTTPStatus: 200, Took: 1234567 * time.Nanosecond},
	}
	long := e
	long.Reason = strings.Repeat("a long reason ", 60)
	for _, c := range []struct {
		name string
		e    Entry
		want string
	}{
		{"entry", e, "044207eb5e3ec6ba3b8f630dca14e9f0d188157084130cd115e1720f4b348e2f"},
		{"zero", Entry{}, "b6a4f30c4b15047a4e0919af8dc043ddaba1110a192b66cfaf76adcf20d91ffc"},
		{"long reason", long, "a9f56351af1ebc81ffa32f569a3bd27015959d3ff1c1eefd5e3ef068f5e53a87"},
	} {
		assert.Equal(t, entryHash(&c.e), c.want, c.name)
	}
}

func BenchmarkEntryHash(b *testing.B) {
	e := Entry{Chain: "relay-00112233", Seq: 1234567, GUID: "dec0de00000000000000000000000001", At: time.Now(),
		StateBefore: StateSent, StateAfter: StateDone, RspAfter: codeOK, Attempts: 1, Command: "relay", Host: "host", PID: 40123,
		Why: Why{Reason: "core answered HTTP 200", HTTPStatus: 200, Took: time.Millisecond}}
	b.ReportAllocs()
	for b.Loop() {
		e.PrevHash = entryHash(&e)
	}
}
