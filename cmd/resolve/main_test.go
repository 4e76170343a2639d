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
		{[]string{"--core", core.URL, "--min-age", "60"}, 2, "--db is required"},
		{[]string{"--db", db, "--core", core.URL}, 2, "--min-age is required"},
		{[]string{"--db", db, "--min-age", "60"}, 2, "--core is required"},
		{[]string{"--db", db, "--core", "ftp://x", "--min-age", "60"}, 2, "want http"},
		{[]string{"--db", db, "--core", core.URL, "--min-age", "-1"}, 2, "invalid value"},
		{[]string{"--db", db, "--core", core.URL, "--min-age", "1m"}, 0, ""},
		{[]string{"--db", filepath.Join(t.TempDir(), "none.db"), "--core", core.URL, "--min-age", "60"}, 2, ""},
		{[]string{"--db", db, "--core", core.URL, "--min-age", "0.5", "--stale-sent", "0"}, 0, ""},
	} {
		var out bytes.Buffer
		s, err := run(context.Background(), batchcmd.New("resolve"), tc.args, &out)
		assert.Equal(t, batchcmd.Code(err), tc.code, "%v: %v", tc.args, err)
		if tc.msg != "" {
			assert.ErrorContains(t, err, tc.msg)
		}
		if tc.code == 0 {
			assert.Equal(t, s.String(), "resolve: selected=0 done=0 failed=0 unreachable=0 skipped=0 unknown_tx=0 undecodable=0")
		}
	}
}

// TestWrongCorePath: a --core whose path the core does not serve answers
// 404 to every lookup; resolve settles nothing from it, exits 1, and says
// in one line which --core to check.
func TestWrongCorePath(t *testing.T) {
	db := filepath.Join(t.TempDir(), "relay.db")
	ctx := context.Background()
	guid := seedUnknown(t, db)
	core := httptest.NewServer(coresim.New(coresim.Config{}))
	defer core.Close()

	var stdout, stderr bytes.Buffer
	code := batchcmd.Run(ctx, "resolve", run, []string{"--db", db, "--core", core.URL + "/api", "--min-age", "0"}, &stdout, &stderr)
	assert.Equal(t, code, 1, stderr.String())
	assert.Equal(t, stdout.String(), "resolve: selected=1 done=0 failed=0 unreachable=0 skipped=0 unknown_tx=0 undecodable=0 unverified=1\n")
	assert.Equal(t, strings.Count(stderr.String(), "\n"), 1, stderr.String())
	assert.Assert(t, strings.Contains(stderr.String(), "check that --core "+core.URL+"/api is the core's base URL"), stderr.String())

	assert.Equal(t, stateOf(t, db, guid), ledger.StateUnknown)
}

// seedUnknown records a new transfer in the ledger file db as UNKNOWN, as a
// relay whose core call timed out, and returns its GUID.
func seedUnknown(t *testing.T, db string) string {
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
	rec, _ := outcome.OfCall(nil, &req.Header, corecall.Result{Source: generated.SourceReadTimeout}, time.Now())
	assert.NilError(t, l.Finish(ctx, guid, 1, rec))
	return guid
}

// stateOf is guid's state in the ledger file db.
func stateOf(t *testing.T, db, guid string) ledger.State {
	l, err := ledger.Open(db)
	assert.NilError(t, err)
	defer l.Close()
	row, err := l.Get(context.Background(), guid)
	assert.NilError(t, err)
	return row.State
}

// TestTrustLookup404: on a brand-new ledger, a core answering framework
// style 404s (JSON, one body for an unknown transfer and another for a path
// it does not serve) is trusted: exit 0, the row FAILED. One answering both
// alike is not: exit 1, one line saying why and naming --trust-lookup-404,
// the row unchanged; with --trust-lookup-404 the row settles, exit 0.
func TestTrustLookup404(t *testing.T) {
	ctx := context.Background()
	resolve := func(t *testing.T, db, core string, more ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := batchcmd.Run(ctx, "resolve", run, append([]string{"--db", db, "--core", core, "--min-age", "0"}, more...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	sim := coresim.New(coresim.Config{})
	framework := httptest.NewServer(testkit.FrameworkNotFound(sim, testkit.Fixed(`{"error":"no such transfer"}`), testkit.Fixed(`{"error":"no such path"}`)))
	defer framework.Close()
	alike := httptest.NewServer(testkit.FrameworkNotFound(sim, testkit.Fixed(`{"error":"not found"}`), testkit.Fixed(`{"error":"not found"}`)))
	defer alike.Close()

	db := filepath.Join(t.TempDir(), "relay.db")
	guid := seedUnknown(t, db)
	code, stdout, stderr := resolve(t, db, framework.URL)
	assert.Equal(t, code, 0, stderr)
	assert.Equal(t, stdout, "resolve: selected=1 done=0 failed=1 unreachable=0 skipped=0 unknown_tx=0 undecodable=0\n")
	assert.Equal(t, stateOf(t, db, guid), ledger.StateFailed)

	db = filepath.Join(t.TempDir(), "relay.db")
	guid = seedUnknown(t, db)
	code, stdout, stderr = resolve(t, db, alike.URL)
	assert.Equal(t, code, 1, stderr)
	assert.Equal(t, stdout, "resolve: selected=1 done=0 failed=0 unreachable=0 skipped=0 unknown_tx=0 undecodable=0 unverified=1\n")
	assert.Equal(t, strings.Count(stderr, "\n"), 1, stderr)
	assert.Assert(t, strings.Contains(stderr, "exactly as it answers a path it does not serve"), stderr)
	assert.Assert(t, strings.Contains(stderr, "--trust-lookup-404"), stderr)
	assert.Equal(t, stateOf(t, db, guid), ledger.StateUnknown)

	code, stdout, stderr = resolve(t, db, alike.URL, "--trust-lookup-404")
	assert.Equal(t, code, 0, stderr)
	assert.Equal(t, stdout, "resolve: selected=1 done=0 failed=1 unreachable=0 skipped=0 unknown_tx=0 undecodable=0\n")
	assert.Equal(t, stateOf(t, db, guid), ledger.StateFailed)
}
