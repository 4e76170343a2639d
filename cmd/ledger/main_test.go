package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/app"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

const (
	guidDone    = "00000000000000000000000000000001"
	guidUnknown = "00000000000000000000000000000002"
	guidSent    = "00000000000000000000000000000003"
)

// prepare writes a ledger with one DONE, one UNKNOWN and one SENT row, the
// way the relay writes them.
func prepare(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "relay.db")
	l, err := ledger.Open(path)
	assert.NilError(t, err)
	defer l.Close()
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 10, 30, 0, 0, time.Local)
	for _, guid := range []string{guidDone, guidUnknown, guidSent} {
		frame := testkit.Transfer(t, guid, map[string]string{"wdAcct": "11002003004005", "dpBank": "004", "dpAcct": "12345", "amount": "50000", "memo": "rent"})
		h := generated.RawHeader(frame)
		c, err := l.Claim(ctx, ledger.Request{GUID: guid, TxCode: h.TxCode, Frame: frame, Body: frame[generated.HeaderLen:]})
		assert.NilError(t, err)
		assert.Equal(t, c.Outcome, ledger.Owned)
		switch guid {
		case guidDone:
			body := &generated.BKTR0001Response{CoreTxid: "T000000000000001", Balance: 950000, PostedAt: "20261129103001"}
			rsp, err := wire.AppendResponse(nil, &h, generated.RspHTTP200, body, now)
			assert.NilError(t, err)
			assert.NilError(t, l.Finish(ctx, guid, 1, ledger.Outcome{Why: ledger.Why{Reason: "test"}, State: ledger.StateDone, RspCode: string(generated.RspHTTP200), Response: rsp}))
		case guidUnknown:
			rsp, err := wire.AppendResponse(nil, &h, generated.RspReadTimeout, nil, now)
			assert.NilError(t, err)
			assert.NilError(t, l.Finish(ctx, guid, 1, ledger.Outcome{Why: ledger.Why{Reason: "test"}, State: ledger.StateUnknown, RspCode: string(generated.RspReadTimeout), Response: rsp}))
		}
	}
	return path
}

func runOut(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(context.Background(), args, &out, time.Now().Add(time.Hour))
	return out.String(), err
}

func TestShowDecodesFrames(t *testing.T) {
	db := prepare(t)
	out, err := runOut(t, "show", "--db", db, guidDone)
	assert.NilError(t, err)
	for _, want := range []string{"STATE       DONE", "RSP_CODE    0000", "WD_ACCT", "11002003004005", "AMOUNT", "50000", "MEMO", "rent", "CORE_TXID", "T000000000000001", "BALANCE", "950000"} {
		assert.Assert(t, is.Contains(out, want))
	}
	assert.Assert(t, is.Regexp(`(?s)response frame.*FLAG\s+R\n`, out))

	out, err = runOut(t, "show", "--db", db, "--json", guidSent)
	assert.NilError(t, err)
	var d rowDetail
	assert.NilError(t, json.Unmarshal([]byte(out), &d))
	assert.Equal(t, d.State, "SENT")
	assert.Assert(t, d.Response == nil)
	assert.Equal(t, d.Request.Body[5], field{"MEMO", "rent"})
}

func TestListAndStats(t *testing.T) {
	db := prepare(t)
	out, err := runOut(t, "list", "--db", db, "--state", "UNKNOWN")
	assert.NilError(t, err)
	assert.Assert(t, is.Contains(out, guidUnknown))
	assert.Assert(t, !strings.Contains(out, guidDone))
	assert.Assert(t, is.Contains(out, "(1 row)\n"))

	out, err = runOut(t, "list", "--db", db, "--json", "--older-than", "7200")
	assert.NilError(t, err)
	var rows []listRow
	assert.NilError(t, json.Unmarshal([]byte(out), &rows))
	assert.Equal(t, len(rows), 0, "rows written just now are not two hours old")

	out, err = runOut(t, "stats", "--db", db, "--json")
	assert.NilError(t, err)
	var s statsOut
	assert.NilError(t, json.Unmarshal([]byte(out), &s))
	assert.Equal(t, s.Total, int64(3))
	assert.DeepEqual(t, s.ByState, map[string]int64{"RECEIVED": 0, "SENT": 1, "DONE": 1, "UNKNOWN": 1, "FAILED": 0})
	assert.Assert(t, s.OldestUnknown != "")

	out, err = runOut(t, "stats", "--db", db)
	assert.NilError(t, err)
	assert.Assert(t, is.Contains(out, "oldest UNKNOWN:"))
	assert.Assert(t, is.Contains(out, "settles it by itself"))
	assert.Assert(t, is.Contains(out, "E901"))
}

func TestErrors(t *testing.T) {
	db := prepare(t)
	_, err := runOut(t, "show", "--db", db, "ffffffffffffffffffffffffffffffff")
	assert.Equal(t, exitCode(err), 1)
	assert.ErrorContains(t, err, "no row for GUID")

	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"show", guidDone},
		{"show", "--db", db},
		{"list", "--db", db, "--state", "LOST"},
		{"list", "--db", db, "--older-than", "-5"},
		{"show", "--db", filepath.Join(t.TempDir(), "missing", "relay.db"), guidDone},
	} {
		_, err := runOut(t, args...)
		assert.Equal(t, exitCode(err), 2, "%v: %v", args, err)
	}

	notLedger := filepath.Join(t.TempDir(), "notes.txt")
	assert.NilError(t, os.WriteFile(notLedger, []byte("not a database"), 0o644))
	_, err = runOut(t, "stats", "--db", notLedger)
	assert.Equal(t, exitCode(err), 2)
}

// TestListManyPages: list prints what it reads page by page (the ledger
// reads 256 rows a query); every row comes out once, in order, as text and
// as one JSON array, and --max-rows still counts rows.
func TestListManyPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.db")
	l, err := ledger.Open(path)
	assert.NilError(t, err)
	const n = 600
	want := make([]string, n)
	errs := make(chan error, n)
	for i := range want {
		want[i] = fmt.Sprintf("%032x", i+1)
	}
	for _, guid := range want { // concurrent claims share commits
		frame := testkit.Transfer(t, guid, nil) // here: a failing build must not fail on another goroutine
		go func() {
			_, err := l.Claim(context.Background(), ledger.Request{GUID: guid, TxCode: testkit.TransferTx().Code, Frame: frame, Body: frame[generated.HeaderLen:]})
			errs <- err
		}()
	}
	for range want {
		assert.NilError(t, <-errs)
	}
	assert.NilError(t, l.Close())

	out, err := runOut(t, "list", "--db", path, "--max-rows", "0")
	assert.NilError(t, err)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	assert.Equal(t, len(lines), n+2, "header, rows, count")
	assert.Assert(t, strings.HasPrefix(lines[0], "GUID "))
	var got []string
	for _, line := range lines[1 : n+1] {
		got = append(got, strings.Fields(line)[0])
	}
	slices.Sort(got) // every row once (their order is by updated_at, then GUID)
	assert.DeepEqual(t, got, want)
	assert.Equal(t, lines[n+1], fmt.Sprintf("(%d rows)", n))

	out, err = runOut(t, "list", "--db", path, "--max-rows", "0", "--json")
	assert.NilError(t, err)
	var rows []listRow
	assert.NilError(t, json.Unmarshal([]byte(out), &rows))
	assert.Equal(t, len(rows), n)
	assert.Equal(t, rows[0].State, "SENT")

	out, err = runOut(t, "list", "--db", path, "--max-rows", "300")
	assert.NilError(t, err)
	assert.Assert(t, strings.HasSuffix(out, "(300 rows)\n"), out)
}

// serve refuses, at start, to show account data off the loopback without
// TLS and client certificates or tokens.
func TestServeRefusesAnOpenListen(t *testing.T) {
	db := prepare(t)
	for _, args := range [][]string{
		{"--listen", "0.0.0.0:0"},
		{"--listen", ":0", "--token-file", "/nonexistent"},
	} {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"serve", "--db", db}, args...), &out, time.Now())
		assert.Check(t, is.ErrorContains(err, "is not the loopback"), "%v", args)
		assert.Check(t, is.Equal(app.Code(err), app.ExitBadSettings), "%v", args)
	}
}
