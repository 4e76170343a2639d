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
		Flag: "addr", Default: "127.0.0.1:9200", FromFile: "127.0.0.1:1", FromEnv: "127.0.0.1:2", FromArgs: "127.0.0.1:3",
		BadFlag: "timeout", BadValue: "soon",
	}, parseArgs, func(o options) string { return o.addr }))
}

func TestVersion(t *testing.T) { testkit.CheckVersion(t, cliflag.Version("lhsend"), parseArgs) }
