package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/cliflag"
	"lhrelay/internal/testutil"
)

// TestConfigSources: a setting from the command line, its LHRELAY_
// variable or a --config file, in that order of precedence; a bad value
// names its source in a one-line error.
func TestConfigSources(t *testing.T) {
	for _, tc := range testutil.PrecedenceCases("timeout", "5", "2", "3", "4") {
		t.Run(tc.Name, func(t *testing.T) {
			args, _ := tc.Apply(t)
			o, err := parseArgs(args, io.Discard)
			assert.NilError(t, err)
			assert.Equal(t, cliflag.FormatSeconds(o.timeout), tc.Want)
		})
	}
	for _, tc := range testutil.BadSourceCases("connect-timeout", "soon") {
		t.Run(tc.Name, func(t *testing.T) {
			args, file := tc.Apply(t)
			_, err := parseArgs(args, io.Discard)
			assert.ErrorContains(t, err, tc.WantError(file))
			assert.Assert(t, !strings.Contains(err.Error(), "\n"))
		})
	}
}

func TestVersion(t *testing.T) {
	var out strings.Builder
	_, err := parseArgs([]string{"--version"}, &out)
	assert.ErrorIs(t, err, flag.ErrHelp) // printed; exit 0
	assert.Equal(t, out.String(), cliflag.Version("relay")+"\n")
}

// TestZeroTimeoutNamesItsSource: a value that parses but is out of range
// is refused where it is set, so the error names the variable or file it
// came from.
func TestZeroTimeoutNamesItsSource(t *testing.T) {
	t.Setenv("LHRELAY_TIMEOUT", "0")
	_, err := parseArgs(nil, io.Discard)
	assert.ErrorContains(t, err, `LHRELAY_TIMEOUT: "0": want more than 0 seconds`)
}
