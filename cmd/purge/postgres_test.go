package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/app/batchcmd"
	"lhrelay/internal/ledger"
	"lhrelay/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestPostgresURL: --db takes a PostgreSQL URL; a database without a
// ledger, or one that cannot be reached, is exit status 2 with the URL
// (never its password) in the message.
func TestPostgresURL(t *testing.T) {
	u := pgtest.URL(t)
	var out bytes.Buffer
	_, err := run(context.Background(), batchcmd.New("purge"), []string{"--db", u, "--days", "30"}, &out)
	assert.Equal(t, batchcmd.Code(err), 2)
	assert.ErrorContains(t, err, "no tx table")

	l, err := ledger.Open(u)
	assert.NilError(t, err)
	assert.NilError(t, l.Close())
	s, err := run(context.Background(), batchcmd.New("purge"), []string{"--db", u, "--days", "30"}, &out)
	assert.NilError(t, err)
	assert.Equal(t, s.String(), "purge: deleted=0 history_deleted=0")

	_, err = run(context.Background(), batchcmd.New("purge"), []string{"--db", "postgres://u:hush@127.0.0.1:1/x?connect_timeout=1", "--days", "30"}, &out)
	assert.Equal(t, batchcmd.Code(err), 2)
	assert.ErrorContains(t, err, "postgres://u@127.0.0.1:1/x")
	assert.Check(t, !strings.Contains(err.Error(), "hush"))
}
