package channel

import (
	"fmt"

	"lhrelay/internal/generated"
)

// DecodeRequest reads a request frame back: its header and its
// transaction's request body. It is the relay's view of what a channel sent,
// for display and for tests.
func DecodeRequest(frame []byte) (generated.Header, generated.RequestBody, error) {
	var h generated.Header
	if len(frame) < generated.HeaderLen {
		return h, nil, fmt.Errorf("request frame of %d bytes is shorter than the %d-byte header", len(frame), generated.HeaderLen)
	}
	if err := h.Decode(string(frame[:generated.HeaderLen])); err != nil {
		return h, nil, fmt.Errorf("request header: %w", err)
	}
	if h.Len != len(frame)-generated.PrefixLen {
		return h, nil, fmt.Errorf("request length prefix says %d bytes, %d follow it", h.Len, len(frame)-generated.PrefixLen)
	}
	tx, err := LookupTx(h.TxCode)
	if err != nil {
		return h, nil, err
	}
	body := tx.NewRequest()
	if err := body.Decode(string(frame[generated.HeaderLen:])); err != nil {
		return h, nil, err
	}
	return h, body, nil
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
