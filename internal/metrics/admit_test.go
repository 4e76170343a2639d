package metrics

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/admit"
)

// TestAdmission: shed frames by reason (every reason exported from the
// start, an unknown one ignored), the admission wait, and the limiter's
// gauges read at scrape time; shedding and admitting allocate nothing.
func TestAdmission(t *testing.T) {
	m := New()
	s := gather(t, m)
	assert.Equal(t, s[`lhrelay_core_calls_shed_total{reason="limit"}`], 0.0)
	assert.Equal(t, s[`lhrelay_core_calls_shed_total{reason="deadline"}`], 0.0)

	m.CallShed(string(admit.ReasonLimit))
	m.CallShed(string(admit.ReasonLimit))
	m.CallShed(string(admit.ReasonDeadline))
	m.CallShed("made-up")
	m.CallAdmitted(time.Millisecond)
	lim, err := admit.New(admit.Settings{Max: 8, Initial: 3, Timeout: time.Second})
	assert.NilError(t, err)
	p, err := lim.Acquire()
	assert.NilError(t, err)
	defer p.Done(admit.Ignored, 0)
	m.WatchLimiter("http://core", lim)
	m.WatchLimiter("http://other", nil) // admission off: nothing

	s = gather(t, m)
	assert.Equal(t, s[`lhrelay_core_calls_shed_total{reason="limit"}`], 2.0)
	assert.Equal(t, s[`lhrelay_core_calls_shed_total{reason="deadline"}`], 1.0)
	assert.Equal(t, len(only(s, "lhrelay_core_calls_shed_total")), 2)
	assert.Equal(t, s["lhrelay_core_call_admission_wait_seconds_count"], 1.0)
	assert.Equal(t, s[`lhrelay_core_calls_in_flight{core="http://core"}`], 1.0)
	assert.Equal(t, s[`lhrelay_core_calls_limit{core="http://core"}`], 3.0)
	assert.Equal(t, s[`lhrelay_core_calls_max{core="http://core"}`], 8.0)
	assert.Equal(t, len(only(s, "lhrelay_core_calls_in_flight")), 1)

	allocs := testing.AllocsPerRun(1000, func() {
		m.CallShed(string(admit.ReasonLimit))
		m.CallAdmitted(time.Microsecond)
	})
	assert.Equal(t, allocs, 0.0)
}
