package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/app/batchcmd"
	"lhrelay/internal/corecall"
	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/outcome"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

func TestArguments(t *testing.T) {
	db := filepath.Join(t.TempDir(), "relay.db")
	l, err := ledger.Open(db)
	assert.NilError(t, err)
	assert.NilError(t, l.Close())
	core := httptest.NewServer(coresim.New(coresim.Config{}))
	defer core.Close()

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--core", core.URL, "--max-attempts", "3"}, 2, "--db is required"},
		{[]string{"--db", db, "--core", core.URL}, 2, "--max-attempts is required"},
		{[]string{"--db", db, "--core", core.URL, "--max-attempts", "1"}, 2, "at least 2"},
		{[]string{"--db", db, "--max-attempts", "3"}, 2, "--core is required"},
		{[]string{"--db", db, "--core", core.URL, "--max-attempts", "3", "--timeout", "0"}, 2, "flag -timeout: \"0\": want more than 0 seconds"},
		{[]string{"--db", filepath.Join(t.TempDir(), "x", "none.db"), "--core", core.URL, "--max-attempts", "3"}, 2, ""},
		{[]string{"--db", db, "--core", core.URL, "--max-attempts", "3"}, 0, ""},
		{[]string{"--db", db, "--core", core.URL, "--max-attempts", "3", "--dry-run"}, 0, ""},
	} {
		var out bytes.Buffer
		_, err := run(context.Background(), batchcmd.New("reprocess"), tc.args, &out)
		assert.Equal(t, batchcmd.Code(err), tc.code, "%v: %v", tc.args, err)
		if tc.msg != "" {
			assert.ErrorContains(t, err, tc.msg)
		}
	}
}

// seedFailed records a new transfer in the ledger file db as FAILED/E902
// (its call never left), and returns its GUID.
func seedFailed(t *testing.T, db string) string {
	l, err := ledger.Open(db)
	assert.NilError(t, err)
	defer l.Close()
	ctx := context.Background()
	guid := testkit.GUID()
	frame := testkit.Transfer(t, guid, nil)
	req, err := wire.ParseRequest(frame)
	assert.NilError(t, err)
	_, err = l.Claim(ctx, ledger.Request{GUID: guid, TxCode: req.Tx.Code, Frame: frame, Body: frame[generated.HeaderLen:]})
	assert.NilError(t, err)
	rec, _ := outcome.OfCall(nil, &req.Header, corecall.Result{Source: generated.SourceConnectFail}, time.Now())
	assert.NilError(t, l.Finish(ctx, guid, 1, rec))
	return guid
}

// rowOf is guid's row in the ledger file db.
func rowOf(t *testing.T, db, guid string) ledger.Row {
	l, err := ledger.Open(db)
	assert.NilError(t, err)
	defer l.Close()
	row, err := l.Get(context.Background(), guid)
	assert.NilError(t, err)
	return row
}

// TestTrustLookup404: on a brand-new ledger, reprocess's lookup before the
// resend trusts a core answering framework-style 404s and sends the row
// (exit 0). A core answering an unknown transfer and a path it does not
// serve alike is not trusted: nothing sent, the row unchanged, exit 1
// naming --trust-lookup-404; with --trust-lookup-404 the row is sent.
func TestTrustLookup404(t *testing.T) {
	ctx := context.Background()
	reprocess := func(db, core string, more ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := batchcmd.Run(ctx, "reprocess", run, append([]string{"--db", db, "--core", core, "--max-attempts", "3"}, more...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	sim := coresim.New(coresim.Config{})
	framework := httptest.NewServer(testkit.FrameworkNotFound(sim, testkit.Fixed(`{"error":"no such transfer"}`), testkit.Fixed(`{"error":"no such path"}`)))
	defer framework.Close()
	alike := httptest.NewServer(testkit.FrameworkNotFound(sim, testkit.Fixed(`{"error":"not found"}`), testkit.Fixed(`{"error":"not found"}`)))
	defer alike.Close()

	db := filepath.Join(t.TempDir(), "relay.db")
	guid := seedFailed(t, db)
	code, stdout, stderr := reprocess(db, framework.URL)
	assert.Equal(t, code, 0, stderr)
	assert.Equal(t, stdout, "reprocess: selected=1 skipped=0 not_tried=0 exhausted=0 0000=1\n")
	assert.Equal(t, rowOf(t, db, guid).State, ledger.StateDone)
	assert.Equal(t, sim.PostCount(guid), 1)

	db = filepath.Join(t.TempDir(), "relay.db")
	guid = seedFailed(t, db)
	before := rowOf(t, db, guid)
	code, stdout, stderr = reprocess(db, alike.URL)
	assert.Equal(t, code, 1, stderr)
	assert.Equal(t, stdout, "reprocess: selected=1 skipped=0 not_tried=0 exhausted=0 unverified=1\n")
	assert.Assert(t, strings.Contains(stderr, "--trust-lookup-404"), stderr)
	assert.DeepEqual(t, rowOf(t, db, guid), before)
	assert.Equal(t, sim.PostCount(guid), 0)

	code, stdout, stderr = reprocess(db, alike.URL, "--trust-lookup-404")
	assert.Equal(t, code, 0, stderr)
	assert.Equal(t, stdout, "reprocess: selected=1 skipped=0 not_tried=0 exhausted=0 0000=1\n")
	assert.Equal(t, rowOf(t, db, guid).Attempts, 2)
	assert.Equal(t, sim.PostCount(guid), 1)
}
