package main

import (
	"bytes"
	"context"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/app"
	"lhrelay/internal/app/batchcmd"
	"lhrelay/internal/testkit"
)

// TestConfigSources: --db from the command line, LHRELAY_DB or a --config
// file, in that order of precedence; a bad value names its source.
func TestConfigSources(t *testing.T) {
	testkit.CheckSources(t, testkit.LedgerSources(t, runArgs, app.ExitBadSettings, []string{"--days", "30"}, "dry-run", "maybe"))
}

func TestVersionAndHelpExitZero(t *testing.T) {
	for _, arg := range []string{"--version", "-h"} {
		var out bytes.Buffer
		_, err := run(context.Background(), batchcmd.New("purge"), []string{arg}, &out)
		assert.Equal(t, batchcmd.Code(err), app.ExitOK, "%s: %v", arg, err)
		assert.Assert(t, out.Len() > 0)
	}
}

// runArgs runs the command on args: the --db it read, its exit status and
// error.
func runArgs(args []string) (string, int, error) {
	c := batchcmd.New("purge")
	_, err := run(context.Background(), c, args, &bytes.Buffer{})
	return c.DB, batchcmd.Code(err), err
}
