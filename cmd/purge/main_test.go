package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/app/batchcmd"
	"lhrelay/internal/ledger"
)

func TestArguments(t *testing.T) {
	t.Chdir(t.TempDir()) // a --db taken for a relative file name would land here
	db := filepath.Join(t.TempDir(), "relay.db")
	l, err := ledger.Open(db)
	assert.NilError(t, err)
	assert.NilError(t, l.Close())
	text := filepath.Join(t.TempDir(), "notes.txt")
	assert.NilError(t, os.WriteFile(text, []byte("hello"), 0o644))

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--days", "30"}, 2, "--db is required"},
		{[]string{"--db", db}, 2, "--days is required"},
		{[]string{"--db", db, "--days", "-1"}, 2, "--days"},
		{[]string{"--db", db, "--days", "x"}, 2, "invalid value"},
		{[]string{"--db", db, "--days", "30", "extra"}, 2, "unexpected argument"},
		{[]string{"--db", filepath.Join(t.TempDir(), "nodir", "relay.db"), "--days", "30"}, 2, ""},
		{[]string{"--db", text, "--days", "30"}, 2, ""},
		{[]string{"--db", db, "--days", "30"}, 0, ""},
		{[]string{"--db", db, "--days", "1", "--dry-run"}, 0, ""},
		{[]string{"--db", db, "--days", "0"}, 2, "at least 1"},
		{[]string{"--db", "host=db1 dbname=ledger", "--days", "30"}, 2, "key=value connection string"},
		{[]string{"--db", db, "--days", "0", "--dry-run"}, 2, "at least 1"},
	} {
		var out bytes.Buffer
		s, err := run(context.Background(), batchcmd.New("purge"), tc.args, &out)
		assert.Equal(t, batchcmd.Code(err), tc.code, "%v: %v", tc.args, err)
		if tc.msg != "" {
			assert.ErrorContains(t, err, tc.msg)
		}
		if tc.code == 0 {
			assert.Assert(t, s != nil)
		}
	}
	entries, err := os.ReadDir(".")
	assert.NilError(t, err)
	assert.Equal(t, len(entries), 0, "no file created")
}
