package corecall

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"lhrelay/internal/generated"
	"lhrelay/internal/plant"
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
//
// A Prepared built again with PrepareInto keeps its buffers: the JSON
// body's, the answer's, and the decoded answer (Result.Body) of its
// transaction, which the next Send of it decodes into. One caller that
// sends one call at a time (a relay connection) thus builds and reads a
// call without allocating them.
type Prepared struct {
	tx   *generated.Transaction
	guid string
	path string
	body []byte // the JSON body; nil when tx.JSONBody is false

	// Kept by PrepareInto: the JSON body's buffer, the answer's, and the
	// last 200's decoded body.
	json   []byte
	answer []byte
	rsp    generated.ResponseBody
	reuse  bool
}

// Prepare builds the call for req: method from the registry, path with the
// request's values filled in, and the JSON body when the layout sends one.
func Prepare(tx *generated.Transaction, guid string, req generated.RequestBody) (*Prepared, error) {
	p := new(Prepared)
	if err := prepare(p, tx, guid, req); err != nil {
		return nil, err
	}
	return p, nil
}

// PrepareInto is Prepare into p, a Prepared of an earlier call whose Send
// has returned (or a zero one), reusing its buffers: the Result.Body that
// Send gave for p is overwritten by the next Send of p. On error p is not
// to be sent.
func PrepareInto(p *Prepared, tx *generated.Transaction, guid string, req generated.RequestBody) error {
	p.reuse = true
	return prepare(p, tx, guid, req)
}

func prepare(p *Prepared, tx *generated.Transaction, guid string, req generated.RequestBody) error {
	path, err := req.CorePath()
	if err != nil {
		return fmt.Errorf("corecall: %s %s: path: %w", tx.Code, guid, err)
	}
	p.tx, p.guid, p.path, p.body = tx, guid, path, nil
	if tx.JSONBody {
		if !p.reuse {
			p.body, err = req.CoreJSON(guid)
		} else if p.body, err = req.AppendCoreJSON(p.json[:0], guid); err == nil {
			p.json = p.body
		}
		if err != nil {
			p.body = nil
			return fmt.Errorf("corecall: %s %s: JSON: %w", tx.Code, guid, err)
		}
	}
	return nil
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
	var answer []byte
	var into generated.ResponseBody
	if p.reuse {
		answer = p.answer[:0]
		if p.rsp != nil && p.rsp.TxCode() == p.tx.Code {
			into = p.rsp
		}
	}
	ex := c.exchange(ctx, start, p.tx.Method, p.path, p.guid, p.body, answer)
	if ex.err == nil {
		r := classify(p.tx, p.guid, ex.resp.status, ex.resp.body, ex.resp.bodyErr, into)
		if p.reuse {
			if cap(ex.resp.body) > cap(p.answer) {
				p.answer = ex.resp.body[:0]
			}
			if r.Body != nil {
				p.rsp = r.Body
			}
		}
		if r.Status == http.StatusNotFound && r.Source == generated.SourceHTTP500 {
			c.notFound.note(p.tx.Method, c.base+p.path)
		}
		r.ConnReused = ex.reused
		r.Elapsed = time.Since(start)
		return r
	}
	r := Result{Source: generated.SourceReadTimeout, Err: ex.err, ConnReused: ex.reused}
	if ex.nothingSent || plant.On(plant.ReadTimeoutE902) {
		r.Source = generated.SourceConnectFail
	}
	r.Elapsed = time.Since(start)
	return r
}

// exchanged is one HTTP exchange: the response with its body read (up to
// maxBody), or the error that kept a response from arriving and whether
// no byte of the request can have reached the core.
type exchanged struct {
	resp        response
	err         error // no response; resp is empty
	nothingSent bool  // with err: not one byte of the request reached the kernel (or a TLS 1.3 core refused the relay's certificate)
	reused      bool  // the call went over a pooled connection
}

// writeFailedGrace is how long a call whose request could be written only
// in part still waits for an answer the core may have sent before the
// failure (a refusal of a request it did not want to read in full).
const writeFailedGrace = 50 * time.Millisecond

// exchange sends one request on one connection, once, and reads its answer
// (package comment, "Sent or not sent"). The whole exchange ends by the
// call's deadline: start plus the timeout, or ctx's deadline if sooner;
// ctx ending earlier ends it too.
//
// A body of a known length is read into answer's room (answer[:0]) when
// it fits.
func (c *Client) exchange(ctx context.Context, start time.Time, method, path, guid string, body, answer []byte) (ex exchanged) {
	deadline := start.Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if !validToken(path) || path[0] != '/' || !validToken(guid) {
		ex.nothingSent = true
		ex.err = fmt.Errorf("building the request: path %q or GUID %q cannot be sent as they are", path, guid)
		return ex
	}
	if err := ctx.Err(); err != nil {
		ex.nothingSent = true
		ex.err = fmt.Errorf("waiting for a connection: %w", context.Cause(ctx))
		return ex
	}

	// Fact 1: the connection, pooled or dialled now. Nothing has been
	// written for this call before it is in hand.
	pc := c.pool.get(deadline)
	ex.reused = pc != nil
	if pc == nil {
		var err error
		if pc, err = c.dialConn(ctx, deadline); err != nil {
			ex.nothingSent = true
			ex.err = c.describe(ctx, "connecting", err)
			return ex
		}
		if err := pc.cc.SetDeadline(deadline); err != nil {
			_ = pc.cc.Close()
			ex.nothingSent = true
			ex.err = fmt.Errorf("setting the call's deadline: %w", err)
			return ex
		}
	}
	// ctx ending (a stopping relay) ends the exchange as the deadline
	// would. Registered after the deadline was set so that it cannot be
	// undone by it.
	finish := c.cancels.start(ctx, pc)
	fail := func(stage string, err error) exchanged {
		if finish != nil {
			finish()
		}
		ex.err = c.describe(ctx, stage, err)
		return ex
	}

	// Fact 2: one write of the whole request, counted.
	mark := pc.cc.mark()
	pc.wbuf = appendRequest(pc.wbuf[:0], method, c.prefix, path, c.host, guid, body)
	n, werr := pc.cc.Write(pc.wbuf)
	if werr != nil {
		if n == 0 && pc.cc.sealNothingWritten(mark) {
			ex.nothingSent = true
			return fail("sending the request", werr)
		}
		// Part of the request may have reached the core, and with it
		// possibly an answer: a response is a response, classified by its
		// status. Wait for it briefly, then give up: E901.
		_ = pc.cc.SetReadDeadline(earliest(deadline, time.Now().Add(writeFailedGrace)))
	}
	resp, err := readResponseInto(pc.br, answer)
	if err != nil {
		if werr != nil {
			err = errors.Join(werr, err)
		}
		// A TLS 1.3 core refusing the relay's certificate on a fresh
		// connection processed nothing (see dialTLS); otherwise the byte
		// count decides, and a written request means E901.
		refused := !ex.reused && pc.cc.refusedCert()
		ex.nothingSent = pc.cc.sealNothingWritten(mark) || refused
		stage := "waiting for the answer"
		if werr != nil {
			stage = "sending the request"
		}
		return fail(stage, err)
	}
	if resp.bodyErr != nil && errors.Is(resp.bodyErr, os.ErrDeadlineExceeded) {
		resp.bodyErr = fmt.Errorf("reading the answer: %w (after %v)", c.cause(ctx), time.Since(start).Round(time.Millisecond))
	}
	ex.resp = resp
	// Fact 3 holds trivially: nothing here writes the request again. The
	// connection goes back to the pool only when its answer was read
	// completely, the core did not ask to close it and no cancellation
	// touched its deadline.
	keep := resp.keepAlive && werr == nil
	if finish != nil && finish() {
		keep = false
	}
	if keep {
		c.pool.put(pc)
	} else {
		_ = pc.cc.Close()
	}
	return ex
}

// cause is why a call's deadline passed: ctx's cause if ctx ended,
// otherwise the call's own timeout.
func (c *Client) cause(ctx context.Context) error {
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	return context.DeadlineExceeded
}

// describe wraps an exchange's error with the stage it failed in. A
// deadline that passed is reported as its cause (the call's timeout, ctx's
// deadline or cancellation), matchable with errors.Is.
func (c *Client) describe(ctx context.Context, stage string, err error) error {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%s: %w", stage, c.cause(ctx))
	case ctx.Err() != nil && !errors.Is(err, context.Cause(ctx)):
		return fmt.Errorf("%s: %w (%w)", stage, context.Cause(ctx), err)
	}
	return fmt.Errorf("%s: %w", stage, err)
}

// earliest returns the earlier of two times.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
