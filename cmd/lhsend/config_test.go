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
	for _, tc := range testutil.PrecedenceCases("addr", "127.0.0.1:9200", "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3") {
		t.Run(tc.Name, func(t *testing.T) {
			args, _ := tc.Apply(t)
			o, err := parseArgs(args, io.Discard)
			assert.NilError(t, err)
			assert.Equal(t, o.addr, tc.Want)
		})
	}
	for _, tc := range testutil.BadSourceCases("timeout", "soon") {
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
	assert.Equal(t, out.String(), cliflag.Version("lhsend")+"\n")
}
