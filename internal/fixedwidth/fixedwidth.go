// Package fixedwidth holds the primitives that the generated LH-STD codecs
// (internal/generated) are built from: checking and padding one fixed-width
// field of one kind, and the error that names the offending field.
//
// Nothing here knows a layout: offsets, widths and field names always come
// from the generated code, which takes them from layouts/. Every function is
// allocation-free on its success path so that decoding a whole frame costs one
// string conversion and nothing more.
package fixedwidth

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// Kind is a field kind of the layout files (SPEC §2).
type Kind byte

const (
	Numeric   Kind = 'N' // digits, right-aligned, zero-padded
	Text      Kind = 'X' // printable ASCII, left-aligned, space-padded
	Code      Kind = 'C' // text translated through a code map
	Timestamp Kind = 'T' // YYYYMMDDhhmmss
	Hex       Kind = 'H' // lowercase hexadecimal digits filling the field
)

// String names the kind the way an analyst reads it in an error message.
func (k Kind) String() string {
	switch k {
	case Numeric:
		return "N (numeric)"
	case Text:
		return "X (text)"
	case Code:
		return "C (code)"
	case Timestamp:
		return "T (timestamp YYYYMMDDhhmmss)"
	case Hex:
		return "H (lowercase hex)"
	}
	return "kind " + strconv.QuoteRune(rune(k))
}

// FieldError says which field of which layout could not be decoded or
// encoded, where it sits in the frame, and what was wrong with it.
type FieldError struct {
	Layout string // e.g. "BKTR0001 request"
	Field  string // e.g. "AMOUNT"
	Offset int    // offset of the field in the whole frame, length prefix included
	Width  int    // field width in bytes
	Kind   Kind
	Got    string // the offending bytes or value
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: field %s (offset %d, %d bytes, %s): %s: got %q",
		e.Layout, e.Field, e.Offset, e.Width, e.Kind, e.Reason, e.Got)
}

// LengthError reports a body whose length does not match its layout.
type LengthError struct {
	Layout string
	Want   int
	Got    int
}

func (e *LengthError) Error() string {
	return fmt.Sprintf("%s: body is %d bytes, layout needs %d", e.Layout, e.Got, e.Want)
}

// Digits reports whether s is non-empty and only ASCII digits.
func Digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ParseDigits reads a zero-padded unsigned decimal field. It accepts digits
// only: no sign, no spaces. Fields wider than 18 digits are refused by the
// generator, so the value always fits an int64.
func ParseDigits(s string) (int64, bool) {
	if !Digits(s) || len(s) > 18 {
		return 0, false
	}
	var v int64
	for i := 0; i < len(s); i++ {
		v = v*10 + int64(s[i]-'0')
	}
	return v, true
}

// LowerHex reports whether s is non-empty and only 0-9a-f.
func LowerHex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Printable reports whether every byte of s is printable ASCII (0x20–0x7E),
// the only bytes an LH-STD frame may carry.
func Printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// PrintableBytes is Printable for a byte slice, without converting it.
func PrintableBytes(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// TrimText drops the trailing space padding of a text field.
func TrimText(s string) string {
	n := len(s)
	for n > 0 && s[n-1] == ' ' {
		n--
	}
	return s[:n]
}

var daysIn = [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}

// two reads the two digits at s[i:i+2]; the caller has checked they are digits.
func two(s string, i int) int { return int(s[i]-'0')*10 + int(s[i+1]-'0') }

// ValidTimestamp reports whether s is a plausible YYYYMMDDhhmmss: 14 digits,
// month 01–12, a day that exists in that month (29 February only in leap
// years), hour < 24, minute and second < 60.
func ValidTimestamp(s string) bool {
	if len(s) != 14 || !Digits(s) {
		return false
	}
	year, month, day := two(s, 0)*100+two(s, 2), two(s, 4), two(s, 6)
	if month < 1 || month > 12 || day < 1 || day > daysIn[month] {
		return false
	}
	if month == 2 && day == 29 && !(year%4 == 0 && (year%100 != 0 || year%400 == 0)) {
		return false
	}
	return two(s, 8) < 24 && two(s, 10) < 60 && two(s, 12) < 60
}

// Padding is copied from these constants rather than appended byte by
// byte: encoding a frame is mostly padding.
const (
	spaces = "                                                                "
	zeros  = "0000000000000000000000000000000000000000000000000000000000000000"
)

// field extends dst by width bytes and returns the extended slice and the
// new field's bytes, so a field is written in place without a temporary.
func field(dst []byte, width int) ([]byte, []byte) {
	n := len(dst)
	dst = slices.Grow(dst, width)[:n+width]
	return dst, dst[n:]
}

// fill sets every byte of b to the padding byte of pad.
func fill(b []byte, pad string) {
	for len(b) > 0 {
		b = b[copy(b, pad):]
	}
}

// AppendText appends s left-aligned and space-padded to width. It refuses
// (ok false) a value longer than the field or with non-printable bytes rather
// than truncating it: a silently shortened memo or name is a real incident.
func AppendText(dst []byte, s string, width int) ([]byte, bool) {
	if len(s) > width || !Printable(s) {
		return dst, false
	}
	dst, f := field(dst, width)
	fill(f[copy(f, s):], spaces)
	return dst, true
}

// AppendDigits appends a digit string right-aligned and zero-padded to width.
// It refuses an empty value, non-digits, and values longer than the field.
func AppendDigits(dst []byte, s string, width int) ([]byte, bool) {
	if len(s) > width || !Digits(s) {
		return dst, false
	}
	dst, f := field(dst, width)
	fill(f[:width-len(s)], zeros)
	copy(f[width-len(s):], s)
	return dst, true
}

// AppendNumber appends v zero-padded to width. It refuses negative values
// and values with more digits than the field holds.
func AppendNumber(dst []byte, v int64, width int) ([]byte, bool) {
	if v < 0 {
		return dst, false
	}
	orig := len(dst)
	dst, f := field(dst, width)
	i := width
	for v > 0 {
		if i == 0 {
			return dst[:orig], false
		}
		i--
		f[i] = byte('0' + v%10)
		v /= 10
	}
	fill(f[:i], zeros)
	return dst, true
}

// AppendSpaces appends n spaces (filler fields, blank header fields).
func AppendSpaces(dst []byte, n int) []byte {
	dst, f := field(dst, n)
	fill(f, spaces)
	return dst
}

// Slice returns b[from:to] as a string, clipped to what b holds: the part of
// a field that a short frame carries, or "" when it carries none of it.
func Slice(b []byte, from, to int) string {
	if from >= len(b) {
		return ""
	}
	if to > len(b) {
		to = len(b)
	}
	return string(b[from:to])
}

// AppendRaw appends s cut or space-padded to width, with every byte that is
// not printable ASCII replaced by a space, so that echoing hostile input
// still yields a well-formed frame.
func AppendRaw(dst []byte, s string, width int) []byte {
	for i := 0; i < width; i++ {
		c := byte(' ')
		if i < len(s) && s[i] >= 0x20 && s[i] <= 0x7e {
			c = s[i]
		}
		dst = append(dst, c)
	}
	return dst
}

// TimestampLayout is the time.Format layout of a T field: YYYYMMDDhhmmss.
const TimestampLayout = "20060102150405"

// FormatTimestamp renders t as a T field value.
func FormatTimestamp(t time.Time) string { return t.Format(TimestampLayout) }

// PathSegment escapes a request value that fills one segment of a core URL
// path (SPEC 2). A value that would not address exactly that one segment
// (OneSegment) is refused, whatever escaping does.
func PathSegment(v string) (string, bool) {
	if !OneSegment(v) {
		return "", false
	}
	return url.PathEscape(v), true
}

// OneSegment reports whether v, escaped, addresses exactly one path
// segment: it is not empty (the path would lose a segment) nor a dot
// segment "." or ".." (left as they are by url.PathEscape, and resolved
// away by any client, proxy or server that normalises the path). It is
// PathSegment's check without the escaping, for a value that must be able
// to fill a segment of a path that is not built yet (the lookup's).
func OneSegment(v string) bool {
	return v != "" && v != "." && v != ".."
}
