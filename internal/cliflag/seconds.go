// Package cliflag holds flag.Value types shared by the project's commands, so
// that every command line reads its options the same way (SPEC §5: "Every
// duration on every command line of this project is a number of seconds,
// decimals allowed").
package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Seconds is a flag.Value for a non-negative duration written as a number of
// seconds ("3", "0.5", ".25") or, as a convenience, as a Go duration with a unit
// suffix ("500ms", "1m30s").
//
// A plain number is parsed exactly in decimal (no float rounding: "0.1" is
// exactly 100ms) and may carry at most 9 fractional digits, because a
// time.Duration cannot hold less than a nanosecond and silently dropping digits
// an operator typed is worse than refusing them. Signs, exponents ("1e3"),
// hexadecimal, "NaN" and "Inf" are refused: an operator typing them made a
// mistake we would rather report than interpret.
//
// The zero value is a zero duration. Its underlying type is time.Duration's, so
// a *time.Duration converts to *Seconds (see SecondsVar).
type Seconds time.Duration

// Duration returns s as a time.Duration.
func (s Seconds) Duration() time.Duration { return time.Duration(s) }

// String prints s as a decimal number of seconds with no trailing zeros ("3",
// "0.5"), which Set reads back to the same value. flag uses it for the
// "(default …)" text of -help.
func (s Seconds) String() string {
	return FormatSeconds(time.Duration(s))
}

// Set parses v with ParseSeconds.
func (s *Seconds) Set(v string) error {
	d, err := ParseSeconds(v)
	if err != nil {
		return err
	}
	*s = Seconds(d)
	return nil
}

// SecondsVar defines a seconds flag on fs that stores into p, with value as
// its default, the way fs.DurationVar would.
func SecondsVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*Seconds)(p), name, usage)
}

// PositiveSecondsVar is SecondsVar for a duration that must be more than
// zero (a timeout): 0 is refused when the flag is set, wherever its value
// comes from, so the error names that source (LHRELAY_TIMEOUT: …).
func PositiveSecondsVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*positiveSeconds)(p), name, usage)
}

// positiveSeconds is Seconds refusing zero.
type positiveSeconds Seconds

func (s positiveSeconds) String() string { return Seconds(s).String() }

func (s *positiveSeconds) Set(v string) error {
	var d Seconds
	if err := d.Set(v); err != nil {
		return err
	}
	if d == 0 {
		return fmt.Errorf("%q: want more than 0 seconds", v)
	}
	*s = positiveSeconds(d)
	return nil
}

// FormatSeconds renders d as a decimal number of seconds, exactly and without
// trailing zeros: 3s → "3", 1500ms → "1.5", 1ns → "0.000000001".
func FormatSeconds(d time.Duration) string {
	neg := d < 0
	// Work on the magnitude as uint64 so that math.MinInt64 does not overflow.
	u := uint64(d)
	if neg {
		u = -u
	}
	b := make([]byte, 0, 24)
	if neg {
		b = append(b, '-')
	}
	b = strconv.AppendUint(b, u/1e9, 10)
	if frac := u % 1e9; frac != 0 {
		digits := strconv.AppendUint(make([]byte, 0, 9), frac, 10)
		b = append(b, '.')
		for range 9 - len(digits) {
			b = append(b, '0')
		}
		b = append(b, strings.TrimRight(string(digits), "0")...)
	}
	return string(b)
}

var errEmpty = errors.New("empty duration: want seconds, e.g. 1.5")

// ParseSeconds reads a non-negative duration: a decimal number of seconds with
// at most 9 fractional digits, or a Go duration with a unit suffix (see
// time.ParseDuration). Surrounding spaces are ignored.
func ParseSeconds(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, errEmpty
	}
	if strings.HasPrefix(v, "-") {
		return 0, fmt.Errorf("negative duration %q: want seconds >= 0", v)
	}
	if isDecimal(v) {
		return parseDecimalSeconds(v)
	}
	// Anything else must be a Go duration with a unit. time.ParseDuration
	// accepts a leading "+"; we do not, to keep one spelling per value.
	if v[0] == '+' {
		return 0, fmt.Errorf("invalid duration %q: want seconds, e.g. 1.5, or a Go duration, e.g. 500ms", v)
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want seconds, e.g. 1.5, or a Go duration, e.g. 500ms", v)
	}
	return d, nil
}

// isDecimal reports whether v is digits with at most one '.', and at least
// one digit: "3", "3.", "0.5", ".5".
func isDecimal(v string) bool {
	digits, dots := 0, 0
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}

// parseDecimalSeconds converts a string accepted by isDecimal to a Duration
// with integer arithmetic, refusing values a Duration cannot represent.
func parseDecimalSeconds(v string) (time.Duration, error) {
	whole, frac, _ := strings.Cut(v, ".")
	if len(frac) > 9 {
		return 0, fmt.Errorf("duration %q: more than 9 decimals (finer than a nanosecond)", v)
	}
	const maxWhole = math.MaxInt64 / int64(time.Second)
	var sec int64
	if whole != "" {
		n, err := strconv.ParseInt(whole, 10, 64)
		if err != nil || n > maxWhole {
			return 0, fmt.Errorf("duration %q: too large (max %d seconds)", v, maxWhole)
		}
		sec = n
	}
	var nanos int64
	if frac != "" {
		n, err := strconv.ParseInt(frac, 10, 64)
		if err != nil { // cannot happen: at most 9 digits, checked by isDecimal
			return 0, fmt.Errorf("invalid duration %q", v)
		}
		for range 9 - len(frac) {
			n *= 10
		}
		nanos = n
	}
	if sec == maxWhole && nanos > math.MaxInt64-sec*int64(time.Second) {
		return 0, fmt.Errorf("duration %q: too large (max %d seconds)", v, maxWhole)
	}
	return time.Duration(sec*int64(time.Second) + nanos), nil
}
