package main

import (
	"os"
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
