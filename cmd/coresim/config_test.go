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
		Flag: "delay", Default: "3", FromFile: "0.5", FromEnv: "1", FromArgs: "2",
		BadFlag: "limit", BadValue: "many",
	}, parseArgs, func(o options) string { return cliflag.FormatSeconds(o.delay) }))
}

func TestVersion(t *testing.T) { testutil.CheckVersion(t, cliflag.Version("coresim"), parseArgs) }
