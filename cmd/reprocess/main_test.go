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
