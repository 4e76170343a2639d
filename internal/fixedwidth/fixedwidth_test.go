package fixedwidth

import (
	"testing"

	"gotest.tools/v3/assert"
)

func TestValidTimestamp(t *testing.T) {
	for s, want := range map[string]bool{
		"20261129103000": true,
		"20240229000000": true,  // leap year
		"20000229000000": true,  // divisible by 400
		"19000229000000": false, // divisible by 100 only
		"20250229000000": false,
		"20261131000000": false,
		"20261301000000": false,
		"20261200000000": false,
		"20261129240000": false,
		"20261129236000": false,
		"20261129235960": false,
		"2026112910300":  false,
		"2026112910300x": false,
		"              ": false,
	} {
		assert.Equal(t, ValidTimestamp(s), want, s)
	}
}

func TestAppendNumber(t *testing.T) {
	for _, tc := range []struct {
		v     int64
		width int
		want  string
		ok    bool
	}{
		{0, 4, "0000", true},
		{143, 4, "0143", true},
		{9999, 4, "9999", true},
		{10000, 4, "", false},
		{-1, 4, "", false},
		{9223372036854775807, 19, "9223372036854775807", true},
	} {
		out, ok := AppendNumber([]byte("x"), tc.v, tc.width)
		assert.Equal(t, ok, tc.ok, tc.v)
		if ok {
			assert.Equal(t, string(out), "x"+tc.want)
		} else {
			assert.Equal(t, string(out), "x", "a refused value leaves dst unchanged")
		}
	}
}

func TestAppendTextAndDigits(t *testing.T) {
	out, ok := AppendText(nil, "rent", 70)
	assert.Assert(t, ok)
	assert.Equal(t, len(out), 70, "padding longer than the padding constant")
	assert.Equal(t, string(out[:5]), "rent ")
	_, ok = AppendText(nil, "toolong", 3)
	assert.Assert(t, !ok)
	_, ok = AppendText(nil, "tab\t", 8)
	assert.Assert(t, !ok)
	out, ok = AppendDigits(nil, "42", 5)
	assert.Assert(t, ok)
	assert.Equal(t, string(out), "00042")
	_, ok = AppendDigits(nil, "", 5)
	assert.Assert(t, !ok)
	assert.Equal(t, string(AppendSpaces([]byte("a"), 3)), "a   ")
}

func TestDigitsAndHex(t *testing.T) {
	v, ok := ParseDigits("0000000050000")
	assert.Assert(t, ok)
	assert.Equal(t, v, int64(50000))
	_, ok = ParseDigits("1234567890123456789")
	assert.Assert(t, !ok, "more than 18 digits could overflow")
	assert.Assert(t, LowerHex("0123456789abcdef"))
	assert.Assert(t, !LowerHex("ABC"))
	assert.Assert(t, !LowerHex(""))
	assert.Equal(t, Slice([]byte("abc"), 1, 10), "bc")
	assert.Equal(t, Slice([]byte("abc"), 5, 10), "")
}

func TestPathSegment(t *testing.T) {
	for _, bad := range []string{"", ".", ".."} {
		_, ok := PathSegment(bad)
		assert.Assert(t, !ok, "%q is not one segment", bad)
		assert.Assert(t, !OneSegment(bad), "%q is not one segment", bad)
	}
	for v, want := range map[string]string{
		"LHB": "LHB", "a/b": "a%2Fb", "...": "...", ".a": ".a", " ": "%20", "%2E": "%252E", "a?b#c": "a%3Fb%23c",
	} {
		got, ok := PathSegment(v)
		assert.Assert(t, ok, v)
		assert.Assert(t, OneSegment(v), v)
		assert.Equal(t, got, want)
	}
}
