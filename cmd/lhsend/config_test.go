package main

import (
	"testing"

	"lhrelay/internal/cliflag"
	"lhrelay/internal/testutil"
)

// TestConfigSources: a setting from the command line, its LHRELAY_
// variable or a --config file, in that order of precedence; a bad value
// names its source in a one-line error.
func TestConfigSources(t *testing.T) {
	testutil.CheckSources(t, testutil.ParsedBy(testutil.Sources{
		Flag: "addr", Default: "127.0.0.1:9200", FromFile: "127.0.0.1:1", FromEnv: "127.0.0.1:2", FromArgs: "127.0.0.1:3",
		BadFlag: "timeout", BadValue: "soon",
	}, parseArgs, func(o options) string { return o.addr }))
}

func TestVersion(t *testing.T) { testutil.CheckVersion(t, cliflag.Version("lhsend"), parseArgs) }
