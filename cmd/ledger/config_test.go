package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/cliflag"
	"lhrelay/internal/testkit"
)

// TestConfigSources: each subcommand's --db from the command line,
// LHRELAY_DB or a --config file, in that order (the missing file named is
// the one reported); a bad value names its source.
func TestConfigSources(t *testing.T) {
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name, "relay.db") }
	for _, tc := range testkit.PrecedenceCases("db", "", path("file"), path("env"), path("arg")) {
		if tc.Want == "" {
			continue // --db has no default
		}
		t.Run(tc.Name, func(t *testing.T) {
			args, _ := tc.Apply(t, "stats")
			_, err := runOut(t, args...)
			assert.ErrorContains(t, err, tc.Want)
		})
	}
	for _, tc := range testkit.BadSourceCases("older-than", "soon") {
		t.Run(tc.Name, func(t *testing.T) {
			args, file := tc.Apply(t, "list", "--db", prepare(t))
			_, err := runOut(t, args...)
			assert.ErrorContains(t, err, tc.WantError(file))
		})
	}
}

func TestVersionAndSubcommandHelp(t *testing.T) {
	out, err := runOut(t, "--version")
	assert.NilError(t, err)
	assert.Equal(t, out, cliflag.Version("ledger")+"\n")

	var b strings.Builder
	assert.NilError(t, run(context.Background(), []string{"list", "-h"}, &b, time.Now()))
	assert.Assert(t, strings.Contains(b.String(), "[$LHRELAY_OLDER_THAN]"), b.String())
}

func TestBackup(t *testing.T) {
	db := prepare(t)
	to := filepath.Join(t.TempDir(), "copy.db")
	out, err := runOut(t, "backup", "--db", db, "--to", to)
	assert.NilError(t, err)
	assert.Assert(t, strings.HasPrefix(out, "backup: "+db+" -> "+to+" ("), out)

	orig, err := runOut(t, "stats", "--db", db, "--json")
	assert.NilError(t, err)
	copied, err := runOut(t, "stats", "--db", to, "--json")
	assert.NilError(t, err)
	assert.Equal(t, copied, orig, "the copy holds the same rows")

	_, err = runOut(t, "backup", "--db", db, "--to", to)
	assert.ErrorContains(t, err, "the file exists")
	_, err = runOut(t, "backup", "--db", db)
	assert.ErrorContains(t, err, "--to is required")
}
