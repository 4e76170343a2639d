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
		Flag: "keep-db", Default: "", FromFile: "/nonexistent/f.db", FromEnv: "/nonexistent/e.db", FromArgs: "/nonexistent/a.db",
		BadFlag: "verbose", BadValue: "maybe",
	}, parseArgs, func(o options) string { return o.keepDB }))
}

func TestVersion(t *testing.T) { testkit.CheckVersion(t, cliflag.Version("demo"), parseArgs) }
