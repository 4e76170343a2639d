package channel_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/channel"
	"lhrelay/internal/generated"
)

func answered(ms int, code generated.RspCode) channel.Result {
	return channel.Result{Sent: true, Answered: true, Code: code, Latency: time.Duration(ms) * time.Millisecond}
}

func TestPercentilesNearestRank(t *testing.T) {
	cases := []struct {
		name               string
		lat                []int // ms, in any order
		p50, p90, p99, max int
		mean               time.Duration
	}{
		{"1..100", seq(100), 50, 90, 99, 100, 50500 * time.Microsecond},
		{"1..10", seq(10), 5, 9, 10, 10, 5500 * time.Microsecond},
		{"one", []int{7}, 7, 7, 7, 7, 7 * time.Millisecond},
		{"unsorted with outlier", []int{900, 3, 1, 2, 4, 5, 6, 7, 8, 9}, 5, 9, 900, 900, 94500 * time.Microsecond},
		{"1..1000", seq(1000), 500, 900, 990, 1000, 500500 * time.Microsecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rs []channel.Result
			for i := len(tc.lat) - 1; i >= 0; i-- {
				rs = append(rs, answered(tc.lat[i], generated.RspHTTP200))
			}
			s := channel.Summarize(rs, time.Second)
			ms := time.Millisecond
			assert.DeepEqual(t, s.Latency, channel.Latency{
				P50: time.Duration(tc.p50) * ms, P90: time.Duration(tc.p90) * ms,
				P99: time.Duration(tc.p99) * ms, Max: time.Duration(tc.max) * ms, Mean: tc.mean,
			})
		})
	}
	s := channel.Summarize(nil, time.Second)
	assert.DeepEqual(t, s.Latency, channel.Latency{})
	assert.Assert(t, !s.OK())
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

func TestSummarizeCounts(t *testing.T) {
	var rs []channel.Result
	for range 150 {
		rs = append(rs, answered(2, generated.RspHTTP200))
	}
	for range 30 {
		r := answered(3, generated.RspHTTP200)
		r.Duplicate = true
		rs = append(rs, r)
	}
	for range 10 {
		r := answered(4, generated.RspInProgress)
		r.Duplicate = true
		rs = append(rs, r)
	}
	for range 4 {
		rs = append(rs, answered(1, generated.RspInsufficientFunds))
	}
	mm := answered(1, generated.RspHTTP200)
	mm.Mismatch, mm.Err = true, errors.New("mismatch: answer names another guid")
	rs = append(rs, mm, mm)
	rs = append(rs, channel.Result{Sent: true, Malformed: true, Err: errors.New("malformed answer")})
	rs = append(rs, channel.Result{Sent: true, Err: errors.New("no answer")})
	rs = append(rs, channel.Result{Err: errors.New("cannot reach relay")})
	rs = append(rs, channel.Result{}) // never sent: the run was cut short

	s := channel.Summarize(rs, 2*time.Second)
	assert.Equal(t, s.Frames, 200)
	assert.Equal(t, s.Sent, 198)
	assert.Equal(t, s.Answered, 196)
	assert.Equal(t, s.Duplicates, 40)
	assert.Equal(t, s.Mismatches, 2)
	assert.Equal(t, s.Malformed, 1)
	assert.Equal(t, s.Errors, 2)
	assert.DeepEqual(t, s.Codes, map[generated.RspCode]int{
		generated.RspHTTP200: 182, generated.RspInProgress: 10, generated.RspInsufficientFunds: 4,
	})
	assert.Equal(t, s.TxPerSec, 98.0) // answered / elapsed
	assert.Equal(t, s.FirstError, "mismatch: answer names another guid")
	assert.Assert(t, !s.OK())

	s.Tx, s.Addr, s.Concurrency = "BKTR0001", "127.0.0.1:9200", 4
	var b strings.Builder
	assert.NilError(t, s.WriteText(&b))
	out := squeeze(b.String())
	for _, want := range []string{
		"load 200 × BKTR0001 to 127.0.0.1:9200 over 4 connections in 2s",
		"answered 196 of 200 (sent 198, duplicate GUIDs 40)",
		"throughput 98.0 tx/s",
		"codes 0000 182 p50 2.00ms p99 3.00ms posted; the body carries the result",
		"E903 10 p50 4.00ms p99 4.00ms the same GUID is being processed right now",
		"B201 4 p50 1.00ms p99 1.00ms rejected by the core: insufficient funds",
		"mismatches 2", "malformed 1", "errors 2",
	} {
		assert.Assert(t, is.Contains(out, strings.Split(want, "\n")[0]), want)
	}
	// Codes follow the order of the response code table.
	assert.Assert(t, strings.Index(out, "B201") < strings.Index(out, "E903"))

	raw, err := json.Marshal(s)
	assert.NilError(t, err)
	var j struct {
		Answered  int                       `json:"answered"`
		TxPerSec  float64                   `json:"txPerSec"`
		Codes     map[string]map[string]any `json:"codes"`
		LatencyMs map[string]float64        `json:"latencyMs"`
		OK        bool                      `json:"ok"`
	}
	assert.NilError(t, json.Unmarshal(raw, &j))
	assert.Equal(t, j.Answered, 196)
	assert.Equal(t, j.TxPerSec, 98.0)
	assert.Equal(t, j.Codes["E903"]["count"], 10.0)
	assert.Equal(t, j.Codes["E903"]["meaning"], "the same GUID is being processed right now")
	assert.Equal(t, j.LatencyMs["max"], 4.0)
	assert.Assert(t, !j.OK)

	// What lhsend --json prints reads back as the summary it was, but for
	// what the JSON leaves out (each code's P90, Max and Mean).
	var back channel.Summary
	assert.NilError(t, json.Unmarshal(raw, &back))
	want := s
	for c, l := range want.CodeLatency {
		want.CodeLatency[c] = channel.Latency{P50: l.P50, P99: l.P99}
	}
	assert.DeepEqual(t, back, want)
}

func TestSummaryOK(t *testing.T) {
	rs := []channel.Result{answered(1, generated.RspHTTP200), answered(2, generated.RspHTTP500)}
	s := channel.Summarize(rs, 0)
	assert.Assert(t, s.OK(), "a non-0000 answer is still an answer")
	assert.Equal(t, s.TxPerSec, 0.0) // no division by zero
}

// GUIDs are counted once each, by the answer to the last frame that
// carried them: a GUID shed (E902) and resent as a duplicate that was then
// posted counts as posted.
func TestSummarizeGUIDsByFinalCode(t *testing.T) {
	frame := func(guid string, ms int, code generated.RspCode) channel.Result {
		r := answered(ms, code)
		r.GUID = guid
		return r
	}
	rs := []channel.Result{
		frame("a", 1, generated.RspConnectFail),
		frame("b", 1, generated.RspConnectFail),
		frame("c", 900, generated.RspReadTimeout),
		frame("d", 50, generated.RspHTTP200),
		frame("a", 60, generated.RspHTTP200),
	}
	s := channel.Summarize(rs, time.Second)
	assert.DeepEqual(t, s.Codes, map[generated.RspCode]int{
		generated.RspConnectFail: 2, generated.RspReadTimeout: 1, generated.RspHTTP200: 2,
	})
	assert.DeepEqual(t, s.GUIDs, map[generated.RspCode]int{
		generated.RspConnectFail: 1, generated.RspReadTimeout: 1, generated.RspHTTP200: 2,
	})
	assert.Equal(t, s.CodeLatency[generated.RspConnectFail].P99, time.Millisecond)
	var b strings.Builder
	assert.NilError(t, s.WriteText(&b))
	out := squeeze(b.String())
	assert.Assert(t, is.Contains(out, "GUIDs by final code 0000 2\nE901 1\nE902 1"), out)
}
