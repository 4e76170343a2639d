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
		Flag: "timeout", Default: "2", FromFile: "3", FromEnv: "4", FromArgs: "5",
		BadFlag: "delay", BadValue: "soon",
	}, parseArgs, func(o options) string { return cliflag.FormatSeconds(o.timeout) }))
}

func TestVersion(t *testing.T) { testutil.CheckVersion(t, cliflag.Version("sandbox"), parseArgs) }
