package channel

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"lhrelay/internal/fixedwidth"
	"lhrelay/internal/generated"
)

// Answer is a decoded response frame.
type Answer struct {
	Header generated.Header
	Code   generated.RspCode
	// Body is the transaction's response body, set only when Code is 0000.
	Body generated.ResponseBody
}

// Meaning describes the response code for people.
func (a Answer) Meaning() string { return a.Code.Meaning() }

// Decode reads a response frame: the length prefix must count the bytes
// after it, the header must be valid with FLAG R and an RSP_CODE of the
// table (SPEC §4), and the body must be the transaction's response layout
// when RSP_CODE is 0000 and empty otherwise.
//
// An answer to a frame the relay could not parse (E101, E102) echoes that
// frame's raw bytes at the TX_CODE and GUID positions (SPEC §5.2), so for
// those codes TX_CODE and GUID are taken as they are.
//
// Errors wrap ErrMalformed. On error the returned Answer holds what could be
// read of the header, for display.
func Decode(frame []byte) (Answer, error) {
	var a Answer
	if len(frame) < generated.HeaderLen {
		a.Header = trimmedRawHeader(frame)
		return a, malformed("%d bytes, shorter than the %d-byte header: %q", len(frame), generated.HeaderLen, frame)
	}
	n, err := generated.ParseLengthPrefix(string(frame[:generated.PrefixLen]))
	if err != nil {
		a.Header = trimmedRawHeader(frame)
		return a, malformed("%w", err)
	}
	if n != len(frame)-generated.PrefixLen {
		a.Header = trimmedRawHeader(frame)
		return a, malformed("length prefix says %d bytes, %d follow it", n, len(frame)-generated.PrefixLen)
	}
	if err := a.Header.Decode(string(frame[:generated.HeaderLen])); err != nil {
		a.Header = trimmedRawHeader(frame)
		a.Header.Len = n
		a.Code = generated.RspCode(a.Header.RspCode)
		if !rejectionHeader(a.Header) {
			return a, malformed("%w", err)
		}
	}
	a.Code = generated.RspCode(a.Header.RspCode)
	if a.Header.Flag != generated.FlagResponse {
		return a, malformed("FLAG %q, want %q", a.Header.Flag, generated.FlagResponse)
	}
	if _, ok := a.Code.Source(); !ok {
		return a, malformed("RSP_CODE %q is not a response code", a.Header.RspCode)
	}
	body := frame[generated.HeaderLen:]
	if a.Code != generated.RspHTTP200 {
		if len(body) > 0 {
			return a, malformed("a %s answer carries a %d-byte body; only %s has one", a.Code, len(body), generated.RspHTTP200)
		}
		return a, nil
	}
	tx, ok := generated.LookupTransaction(a.Header.TxCode)
	if !ok {
		return a, malformed("%s answer for unknown transaction %q", a.Code, a.Header.TxCode)
	}
	resp := tx.NewResponse()
	if err := resp.Decode(string(body)); err != nil {
		return a, malformed("%w", err)
	}
	a.Body = resp
	return a, nil
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// trimmedRawHeader reads the header positions of frame as they are, with
// text padding dropped.
func trimmedRawHeader(frame []byte) generated.Header {
	h := generated.RawHeader(frame)
	h.TxCode = fixedwidth.TrimText(h.TxCode)
	h.GUID = fixedwidth.TrimText(h.GUID)
	h.SrcOrg = fixedwidth.TrimText(h.SrcOrg)
	h.DstOrg = fixedwidth.TrimText(h.DstOrg)
	h.RspCode = fixedwidth.TrimText(h.RspCode)
	if n, err := generated.ParseLengthPrefix(fixedwidth.Slice(frame, 0, generated.PrefixLen)); err == nil {
		h.Len = n
	}
	return h
}

// rejectionHeader reports whether h, read raw from a header that did not
// decode, is a valid answer to unparseable input: an E101 or E102 response
// with an empty body whose other fields are sound.
func rejectionHeader(h generated.Header) bool {
	code := generated.RspCode(h.RspCode)
	return (code == generated.RspBadFrame || code == generated.RspUnknownTx) &&
		h.Len == generated.MinFrameLen &&
		h.Flag == generated.FlagResponse &&
		fixedwidth.Printable(h.TxCode+h.GUID+h.SrcOrg+h.DstOrg) &&
		fixedwidth.ValidTimestamp(h.SentAt)
}

// HeaderRows lists the header's fields as name/value pairs, in frame order.
func HeaderRows(h generated.Header) [][2]string {
	var rows [][2]string
	for _, f := range h.Fields() {
		rows = append(rows, [2]string{f.Name, f.Value})
	}
	return rows
}

// WriteText prints the answer as a two-column table (see Rows).
func (a Answer) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range a.Rows() {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	return tw.Flush()
}

// answerJSON is the JSON form of an Answer.
type answerJSON struct {
	Len     int             `json:"len"`
	TxCode  string          `json:"txCode"`
	GUID    string          `json:"guid"`
	Flag    string          `json:"flag"`
	SrcOrg  string          `json:"srcOrg"`
	DstOrg  string          `json:"dstOrg"`
	RspCode string          `json:"rspCode"`
	Meaning string          `json:"meaning"`
	SentAt  string          `json:"sentAt"`
	Body    json.RawMessage `json:"body,omitempty"`
}

// MarshalJSON renders the answer with the header fields, the code's meaning
// and, for 0000, the body under the layout's JSON keys.
func (a Answer) MarshalJSON() ([]byte, error) {
	j := answerJSON{
		Len: a.Header.Len, TxCode: a.Header.TxCode, GUID: a.Header.GUID, Flag: a.Header.Flag,
		SrcOrg: a.Header.SrcOrg, DstOrg: a.Header.DstOrg, RspCode: a.Header.RspCode,
		Meaning: a.Meaning(), SentAt: a.Header.SentAt,
	}
	if a.Body != nil {
		body, err := a.Body.CoreJSON()
		if err != nil {
			return nil, fmt.Errorf("answer body: %w", err)
		}
		j.Body = body
	}
	return json.Marshal(j)
}

// Quote renders bytes that may not be a frame for a person: printable ASCII
// as a quoted string, and the hex digits too when some bytes are not
// printable.
func Quote(b []byte) string {
	q := strconv.Quote(string(b))
	if fixedwidth.PrintableBytes(b) {
		return q
	}
	return fmt.Sprintf("%s (hex %x)", q, b)
}
