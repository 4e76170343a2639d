package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

// TestDemo runs the whole demo in-process: it must succeed, and its table
// must show every response code.
func TestDemo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	assert.NilError(t, run(ctx, &out), out.String())
	text := out.String()
	for _, code := range []string{"0000", "B201", "B202", "B203", "E500", "E102", "E101", "E901", "E902", "E903", "E904"} {
		assert.Assert(t, strings.Contains(text, "  "+code+" "), "no row answered %s in\n%s", code, text)
	}
	assert.Assert(t, !strings.Contains(text, "FAIL:"), text)
	assert.Equal(t, strings.Count(text, "\ncheck ok "), 5, text)
	assert.Assert(t, strings.Contains(text, "no GUID was posted twice"), text)
	assert.Assert(t, strings.Contains(text, "check ok   the history verifies (ledger audit: "), text)
}

// TestDemoJSON: --json with --keep-db; every step got what it expected and
// the ledger is left where asked.
func TestDemoJSON(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := filepath.Join(t.TempDir(), "demo.db")
	var out bytes.Buffer
	assert.NilError(t, options{json: true, keepDB: db}.run(ctx, &out), out.String())

	var rep report
	assert.NilError(t, json.Unmarshal(out.Bytes(), &rep))
	assert.Assert(t, rep.OK)
	// The slow transfer's history: claimed, E901, settled by resolve's
	// lookup. (The replay after it changed nothing: no entry.)
	assert.DeepEqual(t, rep.History, []historyLine{
		{"none → SENT", 1, "claimed: new GUID", "relay"},
		{"SENT → UNKNOWN/E901", 1, "no answer from the core: waiting for the answer: context deadline exceeded", "relay"},
		{"UNKNOWN/E901 → DONE/0000", 1, "lookup 200: posted", "resolve"},
	})
	seen := map[generated.RspCode]bool{}
	for _, s := range rep.Steps {
		assert.Equal(t, s.Got, s.Want, "step %d %s", s.N, s.Name)
		assert.Equal(t, len(s.Problems), 0, "step %d %s: %v", s.N, s.Name, s.Problems)
		seen[s.Got] = true
	}
	for _, src := range generated.Sources() {
		assert.Assert(t, seen[src.Code()], "no step answered %s", src.Code())
	}
	for _, c := range rep.Core {
		assert.Assert(t, c.Posted <= 1, "%s posted %d times", c.GUID, c.Posted)
	}

	led, err := ledger.OpenExisting(db)
	assert.NilError(t, err)
	defer led.Close()
	rows, err := led.List(ctx, ledger.Filter{})
	assert.NilError(t, err)
	assert.Equal(t, len(rows), len(rep.Ledger))
	for _, r := range rows {
		assert.Equal(t, r.State, ledger.StateDone, r.GUID)
	}
}

func TestParseArgs(t *testing.T) {
	existing := filepath.Join(t.TempDir(), "x.db")
	assert.NilError(t, os.WriteFile(existing, nil, 0o600))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--keep-db", existing}, "exists"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"--nope"}, "not defined"},
	} {
		_, err := parseArgs(tc.args, io.Discard)
		assert.ErrorContains(t, err, tc.want)
	}
	o, err := parseArgs([]string{"--json", "--verbose"}, io.Discard)
	assert.NilError(t, err)
	assert.Assert(t, o.json && o.verbose)
}
