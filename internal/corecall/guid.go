package corecall

import (
	"fmt"

	"lhrelay/internal/corejson"
)

// guidKey is the key under which a core answer names its request's GUID
// (SPEC §3).
var guidKey = []string{"guid"}

// aboutGUID checks that a core answer says it is about guid: the same check
// for a call's 200 and for a lookup's.
func aboutGUID(body []byte, guid string) error {
	var buf [64]byte // a GUID is 32 bytes: read without allocating
	id, present, err := answerGUID(buf[:0], body)
	if err != nil {
		return fmt.Errorf("undecodable answer: %w", err)
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

// answerGUID appends to dst the top-level "guid" of a core answer, read as
// encoding/json reads it into a struct with a *string field guid: the key
// matched without regard to case, the last of repeated keys kept, present
// false when it is missing or its last value is null, an error for an
// answer that is not a JSON object (or null) or whose guid is not a string.
func answerGUID(dst, body []byte) (id []byte, present bool, err error) {
	d := corejson.NewDecoder(body)
	for d.Next() {
		if d.Match(guidKey) == 0 {
			id, present = d.AppendString(dst[:0])
			continue
		}
		d.Skip()
	}
	if err := d.Err(); err != nil {
		return nil, false, err
	}
	return id, present, nil
}

// plainGUID is answerGUID's answer, ok false for an answer encoding/json
// would refuse.
func plainGUID(body []byte) (id []byte, present, ok bool) {
	id, present, err := answerGUID(nil, body)
	return id, present, err == nil
}
