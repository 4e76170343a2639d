// Package corejson reads and writes the core's JSON without reflection:
// objects whose members are strings and integers (SPEC §3), which is all
// the generated codecs (internal/generated) and the core-answer checks
// (internal/corecall) need. The generated code calls it field by field.
//
// It answers exactly as encoding/json does for the same job: AppendString
// writes the bytes json.Marshal writes for a string (HTML characters, U+2028
// and U+2029 escaped, invalid UTF-8 replaced), and a Decoder reading a
// member into a string or an integer agrees with json.Unmarshal into a
// struct of *string and *int64 fields: the whole input must be valid JSON
// (nesting included, nothing but whitespace after the value); keys match
// exactly first, then without regard to case (Unicode simple folding, so
// "TXID" and "txid" are "txId"); the last of repeated keys wins, null
// counting as absent; unknown keys are skipped whatever their value; a top-
// level null is an object without members; integers are decimal literals
// within int64, without fraction or exponent. The fuzz tests hold it to
// encoding/json as the oracle.
//
// Neither side allocates on its success path, except that a Decoder
// converts its input to a string once, on the first string value it
// returns, and returns substrings of it (a value with escapes is unescaped
// into its own string).
package corejson

import (
	"strconv"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// safe[c] is true for the ASCII bytes that encoding/json writes as they
// are inside a string (its htmlSafeSet): printable, but not ", \, <, > or &.
var safe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		switch c {
		case '"', '\\', '<', '>', '&':
		default:
			t[c] = true
		}
	}
	return t
}()

// AppendString appends s as a JSON string, byte for byte as json.Marshal
// writes it.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if safe[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				// Other control bytes, and <, > and & (json.Marshal
				// escapes them so that JSON can sit in HTML).
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			// Line and paragraph separators end a JavaScript string.
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendKey appends a member's key and its colon: "key":.
func AppendKey(dst []byte, key string) []byte {
	return append(AppendString(dst, key), ':')
}

// AppendInt appends v as a JSON number.
func AppendInt(dst []byte, v int64) []byte {
	return strconv.AppendInt(dst, v, 10)
}
