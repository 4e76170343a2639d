package console

import (
	"strconv"
	"strings"

	"lhrelay/internal/generated"
)

// frameView is one stored frame decoded field by field through the
// generated layouts, for the GUID page.
type frameView struct {
	Role   string
	Bytes  int
	Header []fieldView
	Body   []fieldView
	// Error: the frame does not decode; Raw is then the frame as stored,
	// shown only with ShowAccounts (it may hold account numbers).
	Error string
	Raw   string
}

type fieldView struct {
	Name  string // the layout's name, e.g. WD_ACCT
	JSON  string // the core's JSON key (body fields)
	Value string
	// Masked: an account number shown but for its last four digits.
	Masked bool
}

// maskKeep is how many trailing characters of an account number stay
// visible: enough for a branch to tell two of a customer's accounts
// apart, as bank statements print them.
const maskKeep = 4

// mask shows only the last maskKeep characters of an account number;
// one no longer than that is hidden whole.
func mask(v string) string {
	if len(v) <= maskKeep {
		return strings.Repeat("*", len(v))
	}
	return strings.Repeat("*", len(v)-maskKeep) + v[len(v)-maskKeep:]
}

// decodeFrame decodes a stored frame; response bodies are decoded only
// with the success code, as they travel. showAccounts leaves account
// numbers whole.
func decodeFrame(role string, frame []byte, request, showAccounts bool) *frameView {
	fv := &frameView{Role: role, Bytes: len(frame)}
	fail := func(msg string) *frameView {
		fv.Error = msg
		if showAccounts {
			fv.Raw = string(frame)
		}
		return fv
	}
	if len(frame) < generated.HeaderLen {
		return fail("frame of " + strconv.Itoa(len(frame)) + " bytes is shorter than a header")
	}
	s := string(frame)
	var h generated.Header
	if err := h.Decode(s[:generated.HeaderLen]); err != nil {
		return fail(err.Error())
	}
	for _, v := range h.Fields() {
		fv.Header = append(fv.Header, fieldView{Name: v.Name, Value: v.Value})
	}
	body := s[generated.HeaderLen:]
	if body == "" {
		return fv
	}
	tx, ok := generated.LookupTransaction(h.TxCode)
	if !ok {
		return fail("TX_CODE " + strconv.Quote(h.TxCode) + " is not registered")
	}
	var values []generated.FieldValue
	if request {
		req := tx.NewRequest()
		if err := req.Decode(body); err != nil {
			return fail(err.Error())
		}
		values = req.Fields()
	} else {
		rsp := tx.NewResponse()
		if err := rsp.Decode(body); err != nil {
			return fail(err.Error())
		}
		values = rsp.Fields()
	}
	for _, v := range values {
		f := fieldView{Name: v.Name, JSON: v.JSON, Value: v.Value}
		if v.Account && !showAccounts {
			f.Value, f.Masked = mask(v.Value), true
		}
		fv.Body = append(fv.Body, f)
	}
	return fv
}
