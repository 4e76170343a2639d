package batchcmd

import (
	"bytes"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/batch"
)

// The status line names the rows done of those selected, the pace, every
// outcome counted so far (not the selection itself) and the time left at
// that pace; with nothing done yet it promises no time.
func TestProgressText(t *testing.T) {
	s := batch.NewSummary("reprocess", "selected", "sent", "settled", "unreachable")
	s.AddN("selected", 2000)
	s.AddN("sent", 1195)
	s.AddN("settled", 5)
	got := progressText("reprocess", batch.Progress{Done: 1200, Total: 2000, Summary: s}, 2*time.Second)
	assert.Equal(t, got, "reprocess: 1200/2000 rows, 600 rows/s, sent=1195 settled=5, about 1s left")

	got = progressText("resolve", batch.Progress{Done: 0, Total: 10, Summary: batch.NewSummary("resolve", "selected")}, time.Second)
	assert.Equal(t, got, "resolve: 0/10 rows, 0 rows/s")
}

// Not a terminal (a scheduler's log, a pipe): no status line at all, only
// the summary the command prints at the end.
func TestProgressSilentWhenNotATerminal(t *testing.T) {
	var buf bytes.Buffer
	assert.Assert(t, Progress(&buf, "reprocess") == nil)
	assert.Equal(t, buf.Len(), 0)
}
