package main

import (
	"testing"

	"lhrelay/internal/cliflag"
	"lhrelay/internal/testkit"
)

// TestConfigSources: a setting from the command line, its LHRELAY_
// variable or a --config file, in that order of precedence; a bad value
// names its source in a one-line error.
func TestConfigSources(t *testing.T) {
	testkit.CheckSources(t, testkit.ParsedBy(testkit.Sources{
		Flag: "timeout", Default: "2", FromFile: "3", FromEnv: "4", FromArgs: "5",
		BadFlag: "delay", BadValue: "soon",
	}, parseArgs, func(o options) string { return cliflag.FormatSeconds(o.timeout) }))
}

func TestVersion(t *testing.T) { testkit.CheckVersion(t, cliflag.Version("sandbox"), parseArgs) }
