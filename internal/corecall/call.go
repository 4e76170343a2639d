package corecall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"lhrelay/internal/plant"
	"net/http"
	"net/http/httptrace"
	"time"

	"lhrelay/internal/generated"
)

// Result is what came of one core call.
type Result struct {
	// Source is the outcome (SPEC §4): HTTP200, one of the core's refusals,
	// HTTP500, READ_TIMEOUT (sent, result unknown) or CONNECT_FAIL (not
	// sent).
	Source generated.Source
	// Body is the decoded answer; set only for HTTP200, and then it is known
	// to encode into the transaction's response layout.
	Body generated.ResponseBody
	// Status is the core's HTTP status, 0 when no response arrived.
	Status int
	// Err says, for the logs, why the outcome is what it is when that is not
	// simply the core's answer: a connect error, a timeout, a body that did
	// not decode. Nil for a clean answer.
	Err error
	// ConnReused is true when the call went over a pooled keep-alive
	// connection (for the logs: it explains an E901 on a connection the
	// core had just closed).
	ConnReused bool
	// Elapsed is how long the call took.
	Elapsed time.Duration
}

// Prepared is a core call built from a validated request, ready to be sent.
// Building it can fail only for a request whose values do not fit the core
// API, which the relay answers as a bad frame before claiming the GUID.
type Prepared struct {
	tx   *generated.Transaction
	guid string
	path string
	body []byte // the JSON body; nil when tx.JSONBody is false
}

// Prepare builds the call for req: method from the registry, path with the
// request's values filled in, and the JSON body when the layout sends one.
func Prepare(tx *generated.Transaction, guid string, req generated.RequestBody) (*Prepared, error) {
	path, err := req.CorePath()
	if err != nil {
		return nil, fmt.Errorf("corecall: %s %s: path: %w", tx.Code, guid, err)
	}
	p := &Prepared{tx: tx, guid: guid, path: path}
	if tx.JSONBody {
		if p.body, err = req.CoreJSON(guid); err != nil {
			return nil, fmt.Errorf("corecall: %s %s: JSON: %w", tx.Code, guid, err)
		}
	}
	return p, nil
}

// Call prepares and sends the request. If it cannot be prepared nothing was
// sent, and the outcome is CONNECT_FAIL with the reason in Err.
func (c *Client) Call(ctx context.Context, tx *generated.Transaction, guid string, req generated.RequestBody) Result {
	p, err := Prepare(tx, guid, req)
	if err != nil {
		return Result{Source: generated.SourceConnectFail, Err: err}
	}
	return c.Send(ctx, p)
}

// Send makes the call exactly once and classifies the outcome (see the
// package comment). It returns within the client's timeout, or sooner if ctx
// ends; either way an unfinished call is classified like any other failure.
func (c *Client) Send(ctx context.Context, p *Prepared) Result {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	var tr tracer
	res := c.roundTrip(ctx, p.tx.Method, p.path, p.guid, p.body, &tr)
	if res.err == nil && res.resp != nil {
		r := classify(p.tx, p.guid, res.resp.StatusCode, res.body, res.bodyErr)
		if r.Status == http.StatusNotFound && r.Source == generated.SourceHTTP500 {
			c.notFound.note(p.tx.Method, c.base+p.path)
		}
		if tr.retried() {
			// Cannot happen (fact 3), but if it did, the core may have
			// seen the request twice: whatever it answered, the outcome
			// is not known.
			r.Source, r.Body = generated.SourceReadTimeout, nil
			r.Err = errors.Join(r.Err, errors.New("the transport sent the request on a second connection"))
		}
		r.ConnReused = tr.reused
		r.Elapsed = time.Since(start)
		return r
	}
	r := Result{Source: generated.SourceReadTimeout, Err: res.err, ConnReused: tr.reused}
	if tr.nothingSent() || plant.On(plant.ReadTimeoutE902) {
		r.Source = generated.SourceConnectFail
	}
	r.Elapsed = time.Since(start)
	return r
}

// rtResult is one HTTP exchange: the response with its body read (up to
// maxBody), or the error that kept a response from arriving.
type rtResult struct {
	resp    *http.Response
	body    []byte
	bodyErr error
	err     error
}

// emptyBody is the body of a request that has none. It is not http.NoBody
// on purpose: a request with a nil or NoBody body and an idempotent method
// is one net/http may send twice (package comment, fact 3). The transport
// probes it, finds it empty and sends no body.
type emptyBody struct{}

func (emptyBody) Read([]byte) (int, error) { return 0, io.EOF }
func (emptyBody) Close() error             { return nil }

func (c *Client) roundTrip(ctx context.Context, method, path, guid string, body []byte, tr *tracer) rtResult {
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, tr.clientTrace()), method, c.base+path, nil)
	if err != nil {
		// Nothing was sent: tr saw no connection.
		return rtResult{err: fmt.Errorf("building the request: %w", err)}
	}
	// Body without GetBody: never replayable, so never retried (fact 3).
	if body != nil {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.Header["Content-Type"] = []string{"application/json"}
	} else {
		req.Body = emptyBody{}
	}
	req.Header["X-Guid"] = []string{guid}

	resp, err := c.transport.RoundTrip(req)
	if err != nil {
		return rtResult{err: tr.describe(ctx, err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err == nil && len(b) > maxBody {
		err = fmt.Errorf("answer longer than %d bytes", maxBody)
	}
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("reading the answer: %w (after %v)", context.Cause(ctx), c.timeout)
	}
	return rtResult{resp: resp, body: b, bodyErr: err}
}
