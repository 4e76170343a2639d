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
		Flag: "delay", Default: "3", FromFile: "0.5", FromEnv: "1", FromArgs: "2",
		BadFlag: "limit", BadValue: "many",
	}, parseArgs, func(o options) string { return cliflag.FormatSeconds(o.delay) }))
}

func TestVersion(t *testing.T) { testkit.CheckVersion(t, cliflag.Version("coresim"), parseArgs) }
