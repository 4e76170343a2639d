package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/batch"
	"lhrelay/internal/testutil"
)

// TestConfigSources: --db from the command line, LHRELAY_DB or a --config
// file, in that order of precedence (the missing file it names is the one
// reported); a bad value names its source.
func TestConfigSources(t *testing.T) {
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name, "relay.db") }
	for _, tc := range testutil.PrecedenceCases("db", "", path("file"), path("env"), path("arg")) {
		if tc.Want == "" {
			continue // --db has no default
		}
		t.Run(tc.Name, func(t *testing.T) {
			args, _ := tc.Apply(t, "--core", "http://127.0.0.1:1", "--max-attempts", "3")
			_, err := run(context.Background(), batch.NewCommand("reprocess"), args, &bytes.Buffer{})
			assert.Equal(t, batch.ExitCode(err), batch.ExitUsage)
			assert.ErrorContains(t, err, tc.Want)
		})
	}
	for _, tc := range testutil.BadSourceCases("timeout", "x") {
		t.Run(tc.Name, func(t *testing.T) {
			args, file := tc.Apply(t, append([]string{"--db", path("x")}, "--core", "http://127.0.0.1:1", "--max-attempts", "3")...)
			_, err := run(context.Background(), batch.NewCommand("reprocess"), args, &bytes.Buffer{})
			assert.Equal(t, batch.ExitCode(err), batch.ExitUsage)
			assert.ErrorContains(t, err, tc.WantError(file))
		})
	}
}

func TestVersionAndHelpExitZero(t *testing.T) {
	for _, arg := range []string{"--version", "-h"} {
		var out bytes.Buffer
		_, err := run(context.Background(), batch.NewCommand("reprocess"), []string{arg}, &out)
		assert.Equal(t, batch.ExitCode(err), batch.ExitOK, "%s: %v", arg, err)
		assert.Assert(t, out.Len() > 0)
	}
}
