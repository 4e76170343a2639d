package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/app/batchcmd"
	"lhrelay/internal/coresim"
	"lhrelay/internal/ledger"
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
