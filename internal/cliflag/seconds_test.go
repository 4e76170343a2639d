package cliflag

import (
	"flag"
	"io"
	"math"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
)

func TestParseSeconds(t *testing.T) {
	good := []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"3", 3 * time.Second},
		{"1", time.Second},
		{"0.5", 500 * time.Millisecond},
		{".5", 500 * time.Millisecond},
		{"2.", 2 * time.Second},
		{"0.1", 100 * time.Millisecond}, // exact, no float rounding
		{"1.000000001", time.Second + time.Nanosecond},
		{"0.000000001", time.Nanosecond},
		{"007", 7 * time.Second},
		{" 1.5 ", 1500 * time.Millisecond},
		{"500ms", 500 * time.Millisecond},
		{"1s", time.Second},
		{"1m30s", 90 * time.Second},
		{"0s", 0},
		{"9223372036", 9223372036 * time.Second},
		{"9223372036.854775807", math.MaxInt64},
	}
	for _, tc := range good {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSeconds(tc.in)
			assert.NilError(t, err)
			assert.Equal(t, got, tc.want)
		})
	}

	bad := []struct {
		in, errContains string
	}{
		{"", "empty"},
		{"   ", "empty"},
		{"-1", "negative"},
		{"-0.5", "negative"},
		{"-1s", "negative"},
		{"NaN", "invalid"},
		{"nan", "invalid"},
		{"Inf", "invalid"},
		{"+Inf", "invalid"},
		{"+1", "invalid"},
		{"+1s", "invalid"},
		{"1e3", "invalid"},
		{"0x10", "invalid"},
		{".", "invalid"},
		{"1.2.3", "invalid"},
		{"1,5", "invalid"},
		{"1 s", "invalid"},
		{"abc", "invalid"},
		{"5x", "invalid"},
		{"0.0000000001", "more than 9 decimals"},
		{"9223372037", "too large"},
		{"9223372036.854775808", "too large"},
		{"99999999999999999999", "too large"},
		{"3000000h", "invalid"},
	}
	for _, tc := range bad {
		t.Run("bad/"+tc.in, func(t *testing.T) {
			_, err := ParseSeconds(tc.in)
			assert.ErrorContains(t, err, tc.errContains)
		})
	}
}

func TestFormatSecondsRoundTrip(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want string
	}{
		{0, "0"},
		{3 * time.Second, "3"},
		{1500 * time.Millisecond, "1.5"},
		{time.Nanosecond, "0.000000001"},
		{10*time.Second + 50*time.Millisecond, "10.05"},
		{math.MaxInt64, "9223372036.854775807"},
		{-1500 * time.Millisecond, "-1.5"},
		{math.MinInt64, "-9223372036.854775808"},
	}
	for _, tc := range cases {
		got := FormatSeconds(tc.d)
		assert.Equal(t, got, tc.want)
		if tc.d >= 0 {
			back, err := ParseSeconds(got)
			assert.NilError(t, err)
			assert.Equal(t, back, tc.d)
		}
	}
}

func TestSecondsVar(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var timeout, delay time.Duration
	SecondsVar(fs, &timeout, "timeout", 3*time.Second, "")
	SecondsVar(fs, &delay, "delay", 2*time.Second, "")
	assert.Equal(t, timeout, 3*time.Second, "default applied before parsing")

	assert.NilError(t, fs.Parse([]string{"--timeout", "0.25"}))
	assert.Equal(t, timeout, 250*time.Millisecond)
	assert.Equal(t, delay, 2*time.Second)
	assert.Equal(t, fs.Lookup("timeout").DefValue, "3")
	assert.Equal(t, fs.Lookup("timeout").Value.String(), "0.25")

	err := fs.Parse([]string{"--delay", "-1"})
	assert.Check(t, is.ErrorContains(err, `invalid value "-1" for flag -delay`))
	assert.Check(t, is.ErrorContains(err, "negative"))
	assert.Equal(t, delay, 2*time.Second, "a refused value leaves the flag unchanged")
}

func TestSecondsValue(t *testing.T) {
	var s Seconds
	assert.Equal(t, s.String(), "0")
	assert.NilError(t, s.Set("1.5"))
	assert.Equal(t, s.Duration(), 1500*time.Millisecond)
	assert.ErrorContains(t, s.Set("x"), "invalid")
	assert.Equal(t, s.Duration(), 1500*time.Millisecond)
}
