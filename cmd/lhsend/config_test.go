package main

import (
	"io"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/channel"
	"lhrelay/internal/cliflag"
	"lhrelay/internal/testkit"
)

// TestConfigSources: a setting from the command line, its LHRELAY_
// variable or a --config file, in that order of precedence; a bad value
// names its source in a one-line error.
func TestConfigSources(t *testing.T) {
	testkit.CheckSources(t, testkit.ParsedBy(testkit.Sources{
		Flag: "addr", Default: "127.0.0.1:9200", FromFile: "127.0.0.1:1", FromEnv: "127.0.0.1:2", FromArgs: "127.0.0.1:3",
		BadFlag: "answer-timeout", BadValue: "soon",
	}, parseArgs, func(o options) string { return o.addr }))
}

func TestVersion(t *testing.T) { testkit.CheckVersion(t, cliflag.Version("lhsend"), parseArgs) }

// TestRelayTimeoutNotInherited: one environment (or config file) serves
// every command of a host, and LHRELAY_TIMEOUT is the relay's core call
// timeout; lhsend's wait for an answer is LHRELAY_ANSWER_TIMEOUT, so the
// relay's setting never becomes lhsend's by accident.
func TestRelayTimeoutNotInherited(t *testing.T) {
	t.Setenv("LHRELAY_TIMEOUT", "0.001")
	o, err := parseArgs(nil, io.Discard)
	assert.NilError(t, err)
	assert.Equal(t, o.timeout, channel.DefaultTimeout)
	t.Setenv("LHRELAY_ANSWER_TIMEOUT", "0.5")
	o, err = parseArgs(nil, io.Discard)
	assert.NilError(t, err)
	assert.Equal(t, o.timeout, 500*time.Millisecond)
}
