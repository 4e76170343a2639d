package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/cliflag"
	"lhrelay/internal/plant"
	"lhrelay/internal/testkit"
)

// TestConfigSources: a setting from the command line, its LHRELAY_
// variable or a --config file, in that order of precedence; a bad value
// names its source in a one-line error.
func TestConfigSources(t *testing.T) {
	testkit.CheckSources(t, testkit.ParsedBy(testkit.Sources{
		Flag: "schedules", Default: "20", FromFile: "5", FromEnv: "6", FromArgs: "7",
		BadFlag: "duration", BadValue: "long",
	}, parseArgs, func(o options) string { return strconv.Itoa(o.schedules) }))
}

func TestVersion(t *testing.T) { testkit.CheckVersion(t, cliflag.Version("verify"), parseArgs) }

// TestBadArguments: each is one line on stderr and exit 2, before anything
// is built or started.
func TestBadArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--store", "oracle"}, `--store "oracle"`},
		{[]string{"--plant", "nonsense"}, `--plant "nonsense": want one of reprocess-unknown`},
		{[]string{"--schedules", "0"}, "--schedules 0"},
		{[]string{"--relays", "0"}, "--relays 0"},
		{[]string{"--first", "-1"}, "--first -1"},
		{[]string{"--rate", "0"}, "--rate 0"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			assert.Equal(t, run(t.Context(), tc.args, &stdout, &stderr), 2)
			assert.Check(t, is.Contains(stderr.String(), tc.want))
			assert.Check(t, strings.HasPrefix(stderr.String(), "verify: "), stderr.String())
			assert.Check(t, is.Equal(strings.Count(stderr.String(), "\n"), 1), stderr.String())
			assert.Check(t, is.Equal(stdout.String(), ""))
		})
	}
}

// TestListPlants: --list-plants names every planted mistake, for .ci/run.
func TestListPlants(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, run(t.Context(), []string{"--list-plants"}, &stdout, &stderr), 0)
	var want []string
	for _, n := range plant.All {
		want = append(want, string(n))
	}
	assert.Check(t, is.Equal(stdout.String(), strings.Join(want, "\n")+"\n"))
	assert.Check(t, is.Equal(stderr.String(), ""))
}
