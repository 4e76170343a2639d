package channel

import (
	"fmt"

	"lhrelay/internal/generated"
	"lhrelay/internal/wire"
)

// DecodeRequest reads a request frame back: its header and its
// transaction's request body. It is the relay's view of what a channel sent,
// for display and for tests.
func DecodeRequest(frame []byte) (generated.Header, generated.RequestBody, error) {
	r, err := wire.ParseRequest(frame)
	return r.Header, r.Body, err
}

// Rows lists the answer for display as name/value pairs: the header fields,
// RSP_CODE followed by its meaning, then the body fields.
func (a Answer) Rows() [][2]string {
	rows := HeaderRows(a.Header)
	for i := range rows {
		if rows[i][0] == "RSP_CODE" {
			rows[i][1] = fmt.Sprintf("%s  %s", orDefault(rows[i][1], "(blank)"), a.Meaning())
		}
	}
	if a.Body != nil {
		for _, f := range a.Body.Fields() {
			rows = append(rows, [2]string{f.Name, f.Value})
		}
	}
	return rows
}
