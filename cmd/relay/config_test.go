package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/cliflag"
	"lhrelay/internal/testkit"
)

// TestConfigSources: a setting from the command line, its LHRELAY_
// variable or a --config file, in that order of precedence; a bad value
// names its source in a one-line error.
func TestConfigSources(t *testing.T) {
	testkit.CheckSources(t, testkit.ParsedBy(testkit.Sources{
		Flag: "timeout", Default: "5", FromFile: "2", FromEnv: "3", FromArgs: "4",
		BadFlag: "connect-timeout", BadValue: "soon",
	}, parseArgs, func(o options) string { return cliflag.FormatSeconds(o.timeout) }))
}

func TestVersion(t *testing.T) { testkit.CheckVersion(t, cliflag.Version("relay"), parseArgs) }

// TestZeroTimeoutNamesItsSource: a value that parses but is out of range
// is refused where it is set, so the error names the variable or file it
// came from.
func TestZeroTimeoutNamesItsSource(t *testing.T) {
	t.Setenv("LHRELAY_TIMEOUT", "0")
	_, err := parseArgs(nil, io.Discard)
	assert.ErrorContains(t, err, `LHRELAY_TIMEOUT: "0": want more than 0 seconds`)
}

// TestDBKeyValueRefused: a libpq key=value string given to --db is refused
// (exit 2, one line asking for the URL form) and no file is created: taken
// for a file name it would give each relay a private ledger (SPEC 6).
func TestDBKeyValueRefused(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--port", "0", "--db", "host=db1 dbname=ledger password=secret"}, io.Discard, &stderr)
	assert.Equal(t, code, 2)
	msg := stderr.String()
	assert.Check(t, strings.HasPrefix(msg, "relay: --db: ") && strings.Count(msg, "\n") == 1, msg)
	assert.Check(t, strings.Contains(msg, "postgres://"), msg)
	assert.Check(t, !strings.Contains(msg, "secret"), "a password is never printed: %s", msg)
	entries, err := os.ReadDir(dir)
	assert.NilError(t, err)
	assert.Equal(t, len(entries), 0, "no file created")
}
