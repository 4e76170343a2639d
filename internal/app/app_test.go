package app

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"testing"

	"gotest.tools/v3/assert"
)

func TestCode(t *testing.T) {
	assert.Equal(t, Code(nil), ExitOK)
	assert.Equal(t, Code(fmt.Errorf("-h: %w", flag.ErrHelp)), ExitOK)
	assert.Equal(t, Code(errors.New("a core unreachable")), ExitAttention)
	assert.Equal(t, Code(fmt.Errorf("start: %w", Badf("--port 9200: in use"))), ExitBadSettings)
	assert.Assert(t, Bad(nil) == nil)
}

// Report writes one line: a driver's lines folded, a repeated attempt said
// once, the command's own name not said twice.
func TestReportOneLine(t *testing.T) {
	var out bytes.Buffer
	err := Badf("--db: ledger: open x: failed to connect:\n\t127.0.0.1:1: refused\n\t127.0.0.1:1: refused\n")
	assert.Equal(t, Report(&out, "relay", err), ExitBadSettings)
	assert.Equal(t, out.String(), "relay: --db: ledger: open x: failed to connect: 127.0.0.1:1: refused\n")

	out.Reset()
	assert.Equal(t, Report(&out, "ledger", errors.New("ledger: backup to f: disk full")), ExitAttention)
	assert.Equal(t, out.String(), "ledger: backup to f: disk full\n")

	out.Reset()
	assert.Equal(t, Report(&out, "ledger", flag.ErrHelp), ExitOK)
	assert.Equal(t, out.String(), "")
}
