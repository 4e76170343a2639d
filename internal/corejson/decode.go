package corejson

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth is encoding/json's bound on nesting; deeper input is invalid.
const maxDepth = 10000

// SyntaxError says that the input is not valid JSON, and where.
type SyntaxError struct {
	Offset int // the offending byte's index; len(input) at an unexpected end
	msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%s (offset %d)", e.msg, e.Offset)
}

// TypeError says that valid JSON holds a value of the wrong type: a
// member's value where a string or an integer is needed, or a top-level
// value that is not an object.
type TypeError struct {
	Key   string // the member's key; "" for the top-level value
	Value string // what was found: "number 1.5", "string", "object", …
	Want  string // "string", "int64" or "object"
}

func (e *TypeError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("cannot read %s as an %s", e.Value, e.Want)
	}
	return fmt.Sprintf("key %q: cannot read %s as %s", e.Key, e.Value, e.Want)
}

// state is where a Decoder is in its object.
type state uint8

const (
	stateStart state = iota // nothing read yet
	stateValue              // a key read; its value is next
	stateAfter              // a member read; a comma or the closing brace is next
	stateDone               // the object and what follows it read, or an error
)

// A Decoder reads the members of one top-level JSON object in order:
//
//	d := corejson.NewDecoder(data)
//	for d.Next() {
//		switch d.Match(keys) {
//		case 0:
//			s, ok = d.String()
//		default:
//			d.Skip()
//		}
//	}
//	if err := d.Err(); err != nil { … }
//
// Each member's value is read once, by String, Int or Skip (Next skips a
// value left unread). The first error ends the object: Next returns false
// and Err returns it. A value that breaks the JSON syntax anywhere in the
// input is a *SyntaxError, even after a value of the wrong type, as with
// json.Unmarshal, which checks the whole input first.
type Decoder struct {
	data  []byte
	text  string // data as a string, once a string value has needed it
	i     int    // the next byte to read
	state state
	err   error
	// The current member's key: data[keyStart:keyEnd], between its quotes;
	// keyPlain when it has no escape and is valid UTF-8 (it is then the
	// key as encoding/json unquotes it).
	keyStart, keyEnd int
	keyPlain         bool
}

// NewDecoder returns a Decoder reading data, which must hold one JSON value:
// an object, or null (read as an object without members).
func NewDecoder(data []byte) Decoder {
	return Decoder{data: data}
}

// Err returns the error that ended the object, once Next has returned
// false; nil when the whole input was a valid object.
func (d *Decoder) Err() error { return d.err }

// Next moves to the next member of the object and reports whether there is
// one. After the last it checks that only whitespace follows the object.
func (d *Decoder) Next() bool {
	switch d.state {
	case stateDone:
		return false
	case stateValue:
		d.Skip()
		if d.state == stateDone {
			return false
		}
	}
	var i int
	if d.state == stateStart {
		if i = d.open(); i < 0 {
			return false
		}
	} else {
		if i = skipSpace(d.data, d.i); i == len(d.data) {
			return d.eof()
		}
		switch d.data[i] {
		case ',':
			if i = skipSpace(d.data, i+1); i == len(d.data) {
				return d.eof()
			}
		case '}':
			d.end(i + 1)
			return false
		default:
			return d.syntax(i, "after object key:value pair")
		}
	}
	if d.data[i] != '"' {
		return d.syntax(i, "looking for beginning of object key string")
	}
	end, plain, ok := d.scanString(i)
	if !ok {
		return false
	}
	d.keyStart, d.keyEnd, d.keyPlain = i+1, end-1, plain
	if i = skipSpace(d.data, end); i == len(d.data) {
		return d.eof()
	}
	if d.data[i] != ':' {
		return d.syntax(i, "after object key")
	}
	d.i, d.state = skipSpace(d.data, i+1), stateValue
	return true
}

// open reads the start of the top-level value and returns the index of the
// first key's quote (or of the closing brace), or -1 when the value is not
// an object with members: a null or an empty object ends it without
// error; any other value is a *TypeError, once the whole input proved
// valid JSON.
func (d *Decoder) open() int {
	i := skipSpace(d.data, 0)
	if i == len(d.data) {
		d.eof()
		return -1
	}
	switch d.data[i] {
	case '{':
		j := skipSpace(d.data, i+1)
		if j == len(d.data) {
			d.eof()
			return -1
		}
		if d.data[j] == '}' {
			d.end(j + 1)
			return -1
		}
		return j
	case 'n':
		if end, ok := d.literal(i, "null"); ok {
			d.end(end)
		}
		return -1
	}
	end, ok := d.skipValue(i, 0)
	if !ok {
		return -1
	}
	d.end(end)
	if d.err == nil {
		d.err = &TypeError{Value: describe(d.data[i:end]), Want: "object"}
	}
	return -1
}

// end is reached past the top-level value: only whitespace may follow.
func (d *Decoder) end(i int) {
	d.state = stateDone
	if i = skipSpace(d.data, i); i < len(d.data) {
		d.syntax(i, "after top-level value")
	}
}

// Match returns the index in keys of the key the current member names, -1
// for none. As encoding/json does for a struct's fields, an exact match
// comes first, then the first key equal under Unicode case folding.
func (d *Decoder) Match(keys []string) int {
	if d.state != stateValue {
		return -1
	}
	key := d.data[d.keyStart:d.keyEnd]
	var buf [64]byte
	if !d.keyPlain {
		key = appendUnquoted(buf[:0], key)
	}
	for i, k := range keys {
		if string(key) == k {
			return i
		}
	}
	for i, k := range keys {
		if strings.EqualFold(string(key), k) {
			return i
		}
	}
	return -1
}

// String reads the current member's value as a string. ok is false for
// null: the key then counts as absent. Any other type is an error.
func (d *Decoder) String() (s string, ok bool) {
	if d.state != stateValue {
		return "", false
	}
	i := d.i
	if i == len(d.data) {
		return "", d.eof()
	}
	switch d.data[i] {
	case '"':
		end, plain, ok := d.scanString(i)
		if !ok {
			return "", false
		}
		d.i, d.state = end, stateAfter
		if !plain {
			return string(appendUnquoted(nil, d.data[i+1:end-1])), true
		}
		if d.text == "" {
			d.text = string(d.data)
		}
		return d.text[i+1 : end-1], true
	case 'n':
		d.null(i)
		return "", false
	}
	d.mistyped(i, "string")
	return "", false
}

// AppendString appends the current member's string value, unquoted, to
// dst: String without a conversion, for a value only compared. ok is false
// for null; any other type is an error.
func (d *Decoder) AppendString(dst []byte) (out []byte, ok bool) {
	if d.state != stateValue {
		return dst, false
	}
	i := d.i
	if i == len(d.data) {
		return dst, d.eof()
	}
	switch d.data[i] {
	case '"':
		end, plain, ok := d.scanString(i)
		if !ok {
			return dst, false
		}
		d.i, d.state = end, stateAfter
		if plain {
			return append(dst, d.data[i+1:end-1]...), true
		}
		return appendUnquoted(dst, d.data[i+1:end-1]), true
	case 'n':
		d.null(i)
		return dst, false
	}
	d.mistyped(i, "string")
	return dst, false
}

// Int reads the current member's value as an integer: a number without
// fraction or exponent, within int64. ok is false for null: the key then
// counts as absent. Any other value is an error.
func (d *Decoder) Int() (v int64, ok bool) {
	if d.state != stateValue {
		return 0, false
	}
	i := d.i
	if i == len(d.data) {
		return 0, d.eof()
	}
	switch c := d.data[i]; {
	case c == '-' || c >= '0' && c <= '9':
		end, ok := d.scanNumber(i)
		if !ok {
			return 0, false
		}
		if v, ok = parseInt(d.data[i:end]); !ok {
			d.mistyped(i, "int64")
			return 0, false
		}
		d.i, d.state = end, stateAfter
		return v, true
	case c == 'n':
		d.null(i)
		return 0, false
	}
	d.mistyped(i, "int64")
	return 0, false
}

// Skip skips the current member's value, checking its syntax.
func (d *Decoder) Skip() {
	if d.state != stateValue {
		return
	}
	if end, ok := d.skipValue(d.i, 1); ok {
		d.i, d.state = end, stateAfter
	}
}

func (d *Decoder) null(i int) {
	if end, ok := d.literal(i, "null"); ok {
		d.i, d.state = end, stateAfter
	}
}

// mistyped reports the value at i as of the wrong type, unless the input
// turns out not to be valid JSON: the rest of it is checked first, as
// json.Unmarshal does.
func (d *Decoder) mistyped(i int, want string) {
	end, ok := d.skipValue(i, 1)
	if !ok {
		return
	}
	key := d.data[d.keyStart:d.keyEnd]
	if !d.keyPlain {
		key = appendUnquoted(nil, key)
	}
	te := &TypeError{Key: string(key), Value: describe(d.data[i:end]), Want: want}
	d.i, d.state = end, stateAfter
	for d.Next() {
		d.Skip()
	}
	if d.err == nil {
		d.err = te
	}
}

// describe names a valid JSON value's type for a TypeError; a number is
// quoted whole.
func describe(v []byte) string {
	switch v[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number " + string(v)
}

func (d *Decoder) fail(err error) bool {
	if d.err == nil {
		d.err = err
	}
	d.state = stateDone
	return false
}

// syntax fails on the unexpected byte at i, as encoding/json words it.
func (d *Decoder) syntax(i int, context string) bool {
	return d.fail(&SyntaxError{Offset: i, msg: "invalid character " + quoteChar(d.data[i]) + " " + context})
}

// eof fails on input that ends inside a value.
func (d *Decoder) eof() bool {
	return d.fail(&SyntaxError{Offset: len(d.data), msg: "unexpected end of JSON input"})
}

// eofIn fails on input that ends inside a token that a space cannot end
// either: encoding/json reads the end of input as a space, and words it so.
func (d *Decoder) eofIn(context string) bool {
	return d.fail(&SyntaxError{Offset: len(d.data), msg: "invalid character ' ' " + context})
}

func quoteChar(c byte) string {
	switch c {
	case '\'':
		return `'\''`
	case '"':
		return `'"'`
	}
	s := strconv.Quote(string(rune(c)))
	return "'" + s[1:len(s)-1] + "'"
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// literal checks the literal word (true, false, null) at i and returns the
// index past it.
func (d *Decoder) literal(i int, word string) (int, bool) {
	for k := 1; k < len(word); k++ {
		if i+k == len(d.data) {
			return 0, d.eofIn("in literal " + word + " (expecting " + quoteChar(word[k]) + ")")
		}
		if d.data[i+k] != word[k] {
			return 0, d.syntax(i+k, "in literal "+word+" (expecting "+quoteChar(word[k])+")")
		}
	}
	return i + len(word), true
}

// scanString checks the string whose opening quote is at i and returns the
// index past its closing quote, and whether it is plain: no escape, valid
// UTF-8, so that its bytes are its value.
func (d *Decoder) scanString(i int) (end int, plain, ok bool) {
	b := d.data
	plain = true
	for j := i + 1; j < len(b); {
		c := b[j]
		switch {
		case c == '"':
			return j + 1, plain, true
		case c == '\\':
			plain = false
			if j+1 == len(b) {
				return 0, false, d.eofIn("in string escape code")
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				for k := j + 2; k < j+6; k++ {
					if k == len(b) {
						return 0, false, d.eofIn(`in \u hexadecimal character escape`)
					}
					if !isHex(b[k]) {
						return 0, false, d.syntax(k, `in \u hexadecimal character escape`)
					}
				}
				j += 6
			default:
				return 0, false, d.syntax(j+1, "in string escape code")
			}
		case c < 0x20:
			return 0, false, d.syntax(j, "in string literal")
		case c < utf8.RuneSelf:
			j++
		default:
			r, size := utf8.DecodeRune(b[j:])
			if r == utf8.RuneError && size == 1 {
				plain = false
			}
			j += size
		}
	}
	return 0, false, d.eof()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// scanNumber checks the number at i and returns the index past it.
func (d *Decoder) scanNumber(i int) (int, bool) {
	b := d.data
	digits := func(j int) int {
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		return j
	}
	j := i
	if b[j] == '-' {
		if j++; j == len(b) {
			return 0, d.eofIn("in numeric literal")
		}
	}
	switch c := b[j]; {
	case c == '0':
		j++
	case c >= '1' && c <= '9':
		j = digits(j + 1)
	default:
		return 0, d.syntax(j, "in numeric literal")
	}
	if j < len(b) && b[j] == '.' {
		if j++; j == len(b) {
			return 0, d.eofIn("after decimal point in numeric literal")
		}
		if b[j] < '0' || b[j] > '9' {
			return 0, d.syntax(j, "after decimal point in numeric literal")
		}
		j = digits(j)
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		if j++; j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if j == len(b) {
			return 0, d.eofIn("in exponent of numeric literal")
		}
		if b[j] < '0' || b[j] > '9' {
			return 0, d.syntax(j, "in exponent of numeric literal")
		}
		j = digits(j)
	}
	return j, true
}

// parseInt reads a valid JSON number as an int64: false for a fraction, an
// exponent, or a value out of range.
func parseInt(b []byte) (int64, bool) {
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	limit := uint64(1<<63 - 1)
	if neg {
		limit++
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > (limit-uint64(c-'0'))/10 {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	if neg {
		return -int64(v), true // -(1<<63) wraps to itself
	}
	return int64(v), true
}

// skipValue checks the value at or after i (whitespace first), nested in
// depth containers, and returns the index past it.
func (d *Decoder) skipValue(i, depth int) (int, bool) {
	b := d.data
	// objects has a bit per container opened here, set for an object and
	// clear for an array: 64 levels on the stack, deeper ones on the heap.
	var small [1]uint64
	objects := small[:]
	level := 0
	var ok bool
	for {
		// A value starts at i.
		if i = skipSpace(b, i); i == len(b) {
			return 0, d.eof()
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if depth+level+1 > maxDepth {
				return 0, d.syntax(i, "exceeded max depth")
			}
			if level/64 == len(objects) {
				objects = append(objects, 0)
			}
			if c == '{' {
				objects[level/64] |= 1 << (level % 64)
			} else {
				objects[level/64] &^= 1 << (level % 64)
			}
			level++
			j := skipSpace(b, i+1)
			if j == len(b) {
				return 0, d.eof()
			}
			if c == '{' && b[j] == '}' || c == '[' && b[j] == ']' {
				i, level, ok = j+1, level-1, true
				break
			}
			if c == '[' {
				i = j
			} else if i, ok = d.memberKey(j); !ok {
				return 0, false
			}
			continue
		case c == '"':
			i, _, ok = d.scanString(i)
		case c == 't':
			i, ok = d.literal(i, "true")
		case c == 'f':
			i, ok = d.literal(i, "false")
		case c == 'n':
			i, ok = d.literal(i, "null")
		case c == '-' || c >= '0' && c <= '9':
			i, ok = d.scanNumber(i)
		default:
			return 0, d.syntax(i, "looking for beginning of value")
		}
		if !ok {
			return 0, false
		}
		// A value ended at i: close containers until one goes on.
		for next := false; !next; {
			if level == 0 {
				return i, true
			}
			if i = skipSpace(b, i); i == len(b) {
				return 0, d.eof()
			}
			object := objects[(level-1)/64]&(1<<((level-1)%64)) != 0
			switch c := b[i]; {
			case c == ',' && object:
				if i, ok = d.memberKey(i + 1); !ok {
					return 0, false
				}
				next = true
			case c == ',':
				i, next = i+1, true
			case c == '}' && object || c == ']' && !object:
				i, level = i+1, level-1
			case object:
				return 0, d.syntax(i, "after object key:value pair")
			default:
				return 0, d.syntax(i, "after array element")
			}
		}
	}
}

// memberKey checks an object member's key and colon at or after i and
// returns the index after the colon.
func (d *Decoder) memberKey(i int) (int, bool) {
	b := d.data
	if i = skipSpace(b, i); i == len(b) {
		return 0, d.eof()
	}
	if b[i] != '"' {
		return 0, d.syntax(i, "looking for beginning of object key string")
	}
	end, _, ok := d.scanString(i)
	if !ok {
		return 0, false
	}
	if i = skipSpace(b, end); i == len(b) {
		return 0, d.eof()
	}
	if b[i] != ':' {
		return 0, d.syntax(i, "after object key")
	}
	return i + 1, true
}

// appendUnquoted appends the value of the string whose bytes between the
// quotes are s (already checked by scanString), decoded as encoding/json
// does: invalid UTF-8 and unpaired surrogates become U+FFFD.
func appendUnquoted(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '\\':
			switch s[i+1] {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(s[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
						r2 = hex4(s[i+2:])
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // " \ /
				dst = append(dst, s[i+1])
			}
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			dst = utf8.AppendRune(dst, r)
			i += size
		}
	}
	return dst
}

// hex4 reads the four hex digits at the start of s (checked by scanString).
func hex4(s []byte) rune {
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
