package corecall

import (
	"encoding/json"
	"fmt"
	"strings"
)

// aboutGUID checks that a core answer says it is about guid: the same check
// for a call's 200 and for a lookup's.
func aboutGUID(body []byte, guid string) error {
	id, present, ok := plainGUID(body)
	if !ok {
		var j struct {
			GUID *string `json:"guid"`
		}
		if err := json.Unmarshal(body, &j); err != nil {
			return fmt.Errorf("undecodable answer: %w", err)
		}
		if present = j.GUID != nil; present {
			id = []byte(*j.GUID)
		}
	}
	if !present || string(id) != guid {
		var got *string
		if present {
			s := string(id)
			got = &s
		}
		return fmt.Errorf("the answer is not about GUID %s (guid %s)", guid, quoteOrMissing(got))
	}
	return nil
}

// plainGUID reads the top-level "guid" of a JSON object without reflection,
// for the answers a core gives: ok is false whenever encoding/json could
// read it differently (invalid JSON, not an object, a key with an escape or
// a non-ASCII byte, a guid that is not a string of printable ASCII without
// escapes, nor null), and the caller then decodes it with encoding/json.
// Like encoding/json it matches the key without regard to ASCII case and
// keeps the last of repeated keys; present is false when the key is
// missing or its last value is null.
func plainGUID(body []byte) (id []byte, present, ok bool) {
	if !json.Valid(body) {
		return nil, false, false
	}
	// Valid JSON from here on: only strings and nesting need following.
	i := skipSpace(body, 0)
	if body[i] != '{' {
		return nil, false, false
	}
	i++
	for {
		i = skipSpace(body, i)
		switch body[i] {
		case '}':
			return id, present, true
		case ',':
			i = skipSpace(body, i+1)
		}
		end, plain := stringEnd(body, i)
		if !plain {
			return nil, false, false
		}
		key := body[i+1 : end-1]
		i = skipSpace(body, end)
		i = skipSpace(body, i+1) // the colon
		if !strings.EqualFold(string(key), "guid") {
			i = skipValue(body, i)
			continue
		}
		switch body[i] {
		case 'n': // null
			id, present = nil, false
			i += len("null")
		case '"':
			end, plain := stringEnd(body, i)
			if !plain {
				return nil, false, false
			}
			id, present = body[i+1:end-1], true
			i = end
		default:
			return nil, false, false // not a string: encoding/json refuses it
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string starting at b[i] (a
// quote), and whether it is plain: printable ASCII without escapes.
func stringEnd(b []byte, i int) (end int, plain bool) {
	plain = true
	for i++; ; i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, plain
		case c == '\\':
			plain = false
			i++ // the escaped byte; a \u's hex digits are plain bytes
		case c < 0x20 || c >= 0x7f:
			plain = false
		}
	}
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	depth := 0
	for {
		switch b[i] {
		case '"':
			i, _ = stringEnd(b, i)
			if depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of the enclosing object
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case ',':
			if depth == 0 {
				return i
			}
		}
		i++
	}
}
