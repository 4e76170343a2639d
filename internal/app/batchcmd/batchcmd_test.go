package batchcmd

import (
	"os"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/batch"
)

func TestMetricsFile(t *testing.T) {
	s := batch.NewSummary("resolve", "done", "failed")
	s.AddN("done", 3)
	path := t.TempDir() + "/batch.prom"
	assert.NilError(t, WriteMetricsFile(path, s, 1, time.Unix(1700000000, 0)))
	data, err := os.ReadFile(path)
	assert.NilError(t, err)
	for _, want := range []string{
		`lhrelay_batch_last_run_rows{command="resolve",outcome="done"} 3`,
		`lhrelay_batch_last_run_rows{command="resolve",outcome="failed"} 0`,
		`lhrelay_batch_last_run_exit_code{command="resolve"} 1`,
		`lhrelay_batch_last_run_timestamp_seconds{command="resolve"} 1.7e+09`,
	} {
		assert.Assert(t, is.Contains(string(data), want))
	}
}
