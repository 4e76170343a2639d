package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

// TestAttribute reads a perf script sample of each kind: the core client's
// TCP send is the core call's even though the channel's answer goes
// through the same net.(*conn).Write, and a sample no stage claims is
// named by its outermost frame.
func TestAttribute(t *testing.T) {
	f, err := os.Open("testdata/script.txt")
	assert.NilError(t, err)
	defer f.Close()
	counts, total, err := attribute(f)
	assert.NilError(t, err)
	assert.Equal(t, total, 6)
	assert.DeepEqual(t, counts, map[string]int{
		"core call: request write (TCP send)":   1,
		"answer write (TCP send)":               1,
		"ledger: fsync":                         1,
		"ledger: SQLite statements (C, libc)":   1,
		"runtime: sysmon":                       1,
		"other: lhrelay/internal/elsewhere.Run": 1,
	})
}

// TestWrite prints microseconds as the share of the CPU per transfer,
// largest first, and folds small unclaimed lines.
func TestWrite(t *testing.T) {
	var b strings.Builder
	write(&b, map[string]int{"ledger: fsync": 3, "answer write (TCP send)": 1, "other: x": 1, "other: y": 5}, 10, 50, 20)
	assert.Equal(t, b.String(), ""+
		" 50.0%    25.0 µs  other: y\n"+
		" 30.0%    15.0 µs  ledger: fsync\n"+
		" 10.0%     5.0 µs  answer write (TCP send)\n"+
		" 10.0%     5.0 µs  other (each under 20.0%)\n"+
		"10 samples\n")
}

// TestRunRefusesEmptyInput: a file with no samples (perf script run on
// the wrong data, or without -F ip,sym) is a bad input, exit 2, one line.
func TestRunRefusesEmptyInput(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.txt")
	assert.NilError(t, os.WriteFile(empty, nil, 0o600))
	var stdout, stderr strings.Builder
	assert.Equal(t, run(context.Background(), []string{empty}, &stdout, &stderr), 2)
	assert.Equal(t, stderr.String(), "perfstages: reading perf script's output: no samples in the input (perf script -F ip,sym)\n")
	assert.Equal(t, stdout.String(), "")
}
