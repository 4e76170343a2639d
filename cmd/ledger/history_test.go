package main

import (
	"encoding/json"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/ledger"
	"lhrelay/internal/testkit"
)

// TestHistoryCommand prints a GUID's entries oldest first, as a table and
// as JSON; a GUID without entries is exit status 1.
func TestHistoryCommand(t *testing.T) {
	db := prepare(t)
	out, err := runOut(t, "history", "--db", db, guidDone)
	assert.NilError(t, err)
	assert.Check(t, is.Regexp(`(?s)history of `+guidDone+` \(2 entries.*none → SENT\s+1\s+claimed: new GUID\s+.* on .* pid \d+ \(.*#1\)\n.*SENT → DONE/0000\s+1\s+test\s`, out))

	out, err = runOut(t, "history", "--db", db, "--json", guidUnknown)
	assert.NilError(t, err)
	var es []historyEntry
	assert.NilError(t, json.Unmarshal([]byte(out), &es))
	assert.Equal(t, len(es), 2)
	assert.Equal(t, es[1].StateBefore, "SENT")
	assert.Equal(t, es[1].StateAfter, "UNKNOWN")
	assert.Equal(t, es[1].RspAfter, "E901")
	assert.Equal(t, es[1].Seq, es[0].Seq+1)

	_, err = runOut(t, "history", "--db", db, "ffffffffffffffffffffffffffffffff")
	assert.Equal(t, exitCode(err), 1)
	assert.ErrorContains(t, err, "no history entries")
}

// TestAuditCommand: a one-line summary and exit 0 on a sound history; exit
// 1 naming the entry once one is edited.
func TestAuditCommand(t *testing.T) {
	db := prepare(t)
	out, err := runOut(t, "audit", "--db", db)
	assert.NilError(t, err)
	assert.Check(t, is.Regexp(`^audit: ok: 1 chains, 5 entries, first \d{4}-\d\d-\d\d \d\d:\d\d:\d\d, last \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\n$`, out))

	var chain string
	raw := testkit.OpenRaw(t, db, ledger.IsURL(db))
	assert.NilError(t, raw.QueryRow(`SELECT chain FROM history WHERE seq = 4`, nil, &chain))
	raw.Exec(`UPDATE history SET reason = 'core answered HTTP 404' WHERE seq = 4`)
	_, err = runOut(t, "audit", "--db", db)
	assert.Equal(t, exitCode(err), 1)
	assert.ErrorContains(t, err, "chain "+chain+" entry 4 (guid "+guidUnknown+"): its content does not match its hash: edited")
}
