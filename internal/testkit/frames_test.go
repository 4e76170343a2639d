package testkit_test

import (
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

// TestFramesComeFromTheRegistry: the kit's transactions are the
// registry's (a transfer settled by lookup, a read), its frames parse as the relay parses them with the fields
// given over the layout's defaults, and RawFrame carries any body under a
// header the relay reads.
func TestFramesComeFromTheRegistry(t *testing.T) {
	assert.Equal(t, testkit.TransferTx().Settle, generated.SettleByLookup)
	assert.Equal(t, testkit.ReadTx().Settle, generated.SettleAsNotPosted)

	tx := testkit.TransferTx()
	last := tx.RequestFields[len(tx.RequestFields)-1]
	guid := testkit.GUID()
	r, err := wire.ParseRequest(testkit.Frame(t, tx, guid, map[string]string{last.JSON: "7"}))
	assert.NilError(t, err)
	assert.Equal(t, r.Header.GUID, guid)
	assert.Equal(t, r.Tx.Code, tx.Code)
	for i, f := range r.Body.Fields() {
		want := tx.RequestFields[i].Default
		if f.JSON == last.JSON {
			want = "7"
		}
		assert.Equal(t, f.Value, want, f.JSON)
	}

	raw := testkit.RawFrame(tx.Code, guid, testkit.SentAt, "short")
	h := generated.RawHeader(raw)
	assert.Equal(t, h.GUID, guid)
	assert.Equal(t, string(raw[generated.HeaderLen:]), "short")
	n, err := generated.ParseLengthPrefix(string(raw[:generated.PrefixLen]))
	assert.NilError(t, err)
	assert.Equal(t, n, len(raw)-generated.PrefixLen)
}

// TestGUIDsIncrease: GUIDs made later sort after earlier ones.
func TestGUIDsIncrease(t *testing.T) {
	a, b := testkit.GUID(), testkit.GUID()
	assert.Assert(t, a < b, "%s then %s", a, b)
	assert.Equal(t, len(a), 32)
}
