package corecall

import (
	"errors"
	"fmt"
	"net/http"
	"sync"

	"lhrelay/internal/corejson"
	"lhrelay/internal/generated"
)

// classify maps a core answer to its source, through the generated table
// only: the layout's own status rules first, then SPEC §5.5's defaults.
// A 200's body is decoded into into, when it is one of tx's (PrepareInto),
// else into a new one.
func classify(tx *generated.Transaction, guid string, status int, body []byte, bodyErr error, into generated.ResponseBody) Result {
	r := Result{Status: status}
	if src, ok := tx.StatusSources[status]; ok && src != generated.SourceHTTP200 {
		if src.LedgerState() == "" {
			// The layout named a source that is not an outcome of a call
			// (BAD_FRAME, say). Whether the core posted is then unknown.
			r.Source = generated.SourceReadTimeout
			r.Err = fmt.Errorf("layout maps HTTP %d to %s, which is not a core outcome", status, src)
			return r
		}
		r.Source = src
		return r
	} else if ok || status == http.StatusOK {
		return success(tx, guid, r, body, bodyErr, into)
	}
	switch {
	case status == http.StatusUnprocessableEntity:
		var result string
		if bodyErr == nil {
			var err error
			if result, err = answerResult(body); err == nil {
				if src, ok := generated.SourceForResult(result); ok {
					r.Source = src
					return r
				}
			}
		}
		// Refused, not posted, for a reason the table does not know.
		r.Source = generated.SourceHTTP500
		r.Err = fmt.Errorf("HTTP 422 with result %q", result)
	case status == http.StatusGatewayTimeout:
		// A gateway gave up waiting for the core, which may have posted.
		r.Source = generated.SourceReadTimeout
		r.Err = errors.New("HTTP 504 from the core's gateway")
	case status >= 400 && status <= 599:
		r.Source = generated.SourceHTTP500
		r.Err = fmt.Errorf("HTTP %d", status)
	default:
		// 1xx, 3xx, or a 2xx other than 200: the API defines none, and
		// nothing says the core did not post.
		r.Source = generated.SourceReadTimeout
		r.Err = fmt.Errorf("unexpected HTTP %d", status)
	}
	return r
}

// success handles a 200: posted, so anything short of a body that decodes
// and encodes is READ_TIMEOUT (settle it by inquiry). So is the 200 of a
// call whose request named its GUID in its JSON (a POST) when the answer
// names no GUID or another one (SPEC 5.5): it proves nothing about this
// request, and its balance is another transfer's.
func success(tx *generated.Transaction, guid string, r Result, body []byte, bodyErr error, into generated.ResponseBody) Result {
	if bodyErr != nil {
		r.Source = generated.SourceReadTimeout
		r.Err = fmt.Errorf("HTTP %d: %w", r.Status, bodyErr)
		return r
	}
	if tx.JSONBody {
		if err := aboutGUID(body, guid); err != nil {
			r.Source = generated.SourceReadTimeout
			r.Err = fmt.Errorf("HTTP %d: %w", r.Status, err)
			return r
		}
	}
	rb := into
	if rb == nil {
		rb = tx.NewResponse()
	}
	if err := decodeSuccess(rb, body); err != nil {
		r.Source = generated.SourceReadTimeout
		r.Err = fmt.Errorf("HTTP %d: %w", r.Status, err)
		return r
	}
	r.Source = generated.SourceHTTP200
	r.Body = rb
	return r
}

// resultKey is the key under which the core's 422 names its result
// (SPEC §3).
var resultKey = []string{"result"}

// answerResult reads the top-level "result" of a 422 answer as
// encoding/json reads it into a struct with a string field result: the key
// matched without regard to case, the last string of repeated keys kept
// (null changes nothing), "" for an answer that is not JSON.
func answerResult(body []byte) (string, error) {
	var result string
	d := corejson.NewDecoder(body)
	for d.Next() {
		if d.Match(resultKey) != 0 {
			d.Skip()
			continue
		}
		if s, ok := d.String(); ok {
			result = s
		}
	}
	err := d.Err()
	var syntax *corejson.SyntaxError
	if errors.As(err, &syntax) {
		return "", err
	}
	return result, err
}

// scratchPool holds buffers for the trial encoding of a success body.
var scratchPool = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// decodeSuccess decodes the core's JSON into rb and checks that it encodes
// into the response layout, so a value too long for its field is caught
// here, not when the answer frame is built.
func decodeSuccess(rb generated.ResponseBody, body []byte) error {
	if err := rb.FromCoreJSON(body); err != nil {
		return fmt.Errorf("undecodable answer: %w", err)
	}
	bp := scratchPool.Get().(*[]byte)
	defer scratchPool.Put(bp)
	b, err := rb.AppendTo((*bp)[:0])
	*bp = b[:0]
	if err != nil {
		return fmt.Errorf("answer does not fit the response layout: %w", err)
	}
	return nil
}
