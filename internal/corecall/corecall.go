// Package corecall makes the one HTTP call to the core banking system that
// an LH-STD request turns into, and says what came of it as a
// generated.Source (SPEC §4, §5.5). The relay, and the batch commands
// (reprocess sends stored requests through Call; resolve uses
// LookupTransfer), share it so that a request is classified the same way
// whoever sends it.
//
// # Sent or not sent: how E901 and E902 are kept apart
//
// CONNECT_FAIL (E902) tells a channel that it may resend with the same GUID,
// so it is given only when no byte of the request can have reached the core.
// Everything else that goes wrong after that point is READ_TIMEOUT (E901):
// the result is unknown and must be settled by inquiry. The split rests on
// three facts, each enforced here rather than hoped for:
//
//  1. The transport writes a request only on a connection it has handed to
//     that request, and it reports every HTTP/1 hand-over through
//     httptrace.ClientTrace.GotConn before writing (HTTP/2, which reports
//     differently, is switched off). So a call that fails before GotConn
//     fired (refused, connect timeout, unresolvable host, the whole
//     --timeout spent dialling) sent nothing: E902.
//  2. Every connection is dialled by this package and wrapped in a
//     countingConn, which counts the bytes the kernel accepted. GotConn
//     notes the count; when the call fails without a response, the
//     connection is sealed (no further write can start) and the count
//     compared. Equal means not one byte of this request was handed to the
//     kernel: E902. Anything else, including a write in progress at that
//     instant, is E901. This is how a stale pooled connection is judged: a
//     write that the kernel refused outright (the core had reset it) sent
//     nothing and is E902; a write the kernel accepted before the EOF or
//     reset showed up may have reached the core and is E901.
//  3. The transport never sends the request a second time. net/http retries
//     a request on a fresh connection only when it can replay it: a body
//     with GetBody set, or a method it deems idempotent with no body
//     (Transport.roundTrip, persistConn.shouldRetryRequest). Every request
//     here carries a non-nil body without GetBody — an empty one for a GET —
//     so no request is replayable and none is retried; a core call is made
//     once even when it is an inquiry. If GotConn ever fires twice for one
//     call anyway, the call is classified E901 and Result.Err says so.
//
// Once a response status line has arrived, the core has seen the request;
// from then on the status and body decide (classify), and any failure
// reading the body of a 200 is E901.
//
// The base URL must reach the core directly: no proxy is used (an HTTP
// proxy would make "connected" mean connected to the proxy). An https URL
// works, but the TLS layer hides the byte count, so there a failure after
// the connection was handed over is always E901.
package corecall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"time"

	"lhrelay/internal/generated"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultTimeout         = 5 * time.Second
	DefaultConnectTimeout  = 2 * time.Second
	DefaultMaxIdleConns    = 256
	DefaultIdleConnTimeout = 30 * time.Second
)

// maxBody caps what is read of a core answer. The answers SPEC §3 describes
// are a few hundred bytes; a larger 200 is unusable (E901), and a larger
// error body is not needed.
const maxBody = 64 << 10

// transferLookupPath is SPEC §3's inquiry, GET /v1/transfers/{guid}.
const transferLookupPath = "/v1/transfers/"

// DialFunc dials the core. It must honour ctx: Client gives it a context
// that ends at the connect timeout.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Config configures a Client.
type Config struct {
	// BaseURL is the core's base URL, e.g. http://127.0.0.1:9201.
	BaseURL string
	// Timeout bounds a whole call, from the moment it starts (dialling
	// included) to the last byte of the answer. Zero means DefaultTimeout.
	Timeout time.Duration
	// ConnectTimeout bounds the TCP connect. Zero means
	// DefaultConnectTimeout; it is never more than Timeout.
	ConnectTimeout time.Duration
	// MaxIdleConns is how many idle keep-alive connections to the core are
	// kept: about the number of calls that can be in flight at once. Zero
	// means DefaultMaxIdleConns.
	MaxIdleConns int
	// IdleConnTimeout closes a keep-alive connection idle this long. It
	// should be shorter than the core's own idle timeout, so that the relay
	// drops a connection before the core does and a call rarely meets a
	// connection the core is closing (which costs an E901). Zero means
	// DefaultIdleConnTimeout.
	IdleConnTimeout time.Duration
	// Dial replaces the TCP dialer (tests). Nil means a net.Dialer.
	Dial DialFunc
}

// Client calls the core. It is safe for concurrent use; make one and share
// it, so that connections are reused.
type Client struct {
	base      string // BaseURL without a trailing slash
	timeout   time.Duration
	transport *http.Transport
}

// New checks cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("corecall: core URL %q: %w", cfg.BaseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("corecall: core URL %q: want http://host:port", cfg.BaseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("corecall: core URL %q: no query, fragment or user info allowed", cfg.BaseURL)
	}
	if cfg.Timeout < 0 || cfg.ConnectTimeout < 0 || cfg.MaxIdleConns < 0 || cfg.IdleConnTimeout < 0 {
		return nil, errors.New("corecall: negative timeout or connection count")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	cfg.ConnectTimeout = min(cfg.ConnectTimeout, cfg.Timeout)
	if cfg.MaxIdleConns == 0 {
		cfg.MaxIdleConns = DefaultMaxIdleConns
	}
	if cfg.IdleConnTimeout == 0 {
		cfg.IdleConnTimeout = DefaultIdleConnTimeout
	}
	dial := cfg.Dial
	if dial == nil {
		d := &net.Dialer{KeepAlive: 30 * time.Second}
		dial = d.DialContext
	}
	connectTimeout := cfg.ConnectTimeout

	var protocols http.Protocols
	protocols.SetHTTP1(true) // see the package comment, fact 1
	t := &http.Transport{
		Proxy: nil, // see the package comment
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, connectTimeout)
			defer cancel()
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: c}, nil
		},
		Protocols:           &protocols,
		MaxIdleConns:        cfg.MaxIdleConns,
		MaxIdleConnsPerHost: cfg.MaxIdleConns,
		IdleConnTimeout:     cfg.IdleConnTimeout,
		// The answers are tiny; gzip would only cost CPU on both sides.
		DisableCompression: true,
	}
	return &Client{
		base:      strings.TrimSuffix(u.String(), "/"),
		timeout:   cfg.Timeout,
		transport: t,
	}, nil
}

// Timeout is the bound on one call.
func (c *Client) Timeout() time.Duration { return c.timeout }

// CloseIdleConnections closes the keep-alive connections not in use.
func (c *Client) CloseIdleConnections() { c.transport.CloseIdleConnections() }

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

// Code is the response code of the outcome.
func (r Result) Code() generated.RspCode { return r.Source.Code() }

// Prepared is a core call built from a validated request, ready to be sent.
// Building it can fail only for a request whose values do not fit the core
// API, which the relay answers as a bad frame before claiming the GUID.
type Prepared struct {
	tx   *generated.Transaction
	guid string
	path string
	body []byte // the JSON body; nil when tx.JSONBody is false
}

// Tx is the transaction the call is for.
func (p *Prepared) Tx() *generated.Transaction { return p.tx }

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
		r := classify(p.tx, res.resp.StatusCode, res.body, res.bodyErr)
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
	if tr.nothingSent() {
		r.Source = generated.SourceConnectFail
	}
	r.Elapsed = time.Since(start)
	return r
}

// LookupTransfer asks the core for the transfer posted with guid (SPEC §3,
// GET /v1/transfers/{guid}). found is true with the decoded body on 200,
// false with a nil error on 404. Anything else — another status, a body that
// does not fit the BKTR0001 response layout, a connection error — is an
// error: the caller cannot settle the transfer from it.
func (c *Client) LookupTransfer(ctx context.Context, guid string) (found bool, body *generated.BKTR0001Response, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var tr tracer
	res := c.roundTrip(ctx, http.MethodGet, transferLookupPath+url.PathEscape(guid), guid, nil, &tr)
	if res.err != nil {
		return false, nil, fmt.Errorf("corecall: lookup %s: %w", guid, res.err)
	}
	switch res.resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return false, nil, nil
	default:
		return false, nil, fmt.Errorf("corecall: lookup %s: core answered HTTP %d", guid, res.resp.StatusCode)
	}
	if res.bodyErr != nil {
		return false, nil, fmt.Errorf("corecall: lookup %s: reading the answer: %w", guid, res.bodyErr)
	}
	// The answer carries the GUID it is about; one about another transfer
	// must not settle this one.
	var id struct {
		GUID *string `json:"guid"`
	}
	if err := json.Unmarshal(res.body, &id); err == nil && id.GUID != nil && *id.GUID != guid {
		return false, nil, fmt.Errorf("corecall: lookup %s: core answered for GUID %q", guid, *id.GUID)
	}
	body = new(generated.BKTR0001Response)
	if err := decodeSuccess(body, res.body); err != nil {
		return false, nil, fmt.Errorf("corecall: lookup %s: %w", guid, err)
	}
	return true, body, nil
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

// classify maps a core answer to its source, through the generated table
// only: the layout's own status rules first, then SPEC §5.5's defaults.
func classify(tx *generated.Transaction, status int, body []byte, bodyErr error) Result {
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
		return success(tx, r, body, bodyErr)
	}
	switch {
	case status == http.StatusUnprocessableEntity:
		var j struct {
			Result string `json:"result"`
		}
		if bodyErr == nil && json.Unmarshal(body, &j) == nil {
			if src, ok := generated.SourceForResult(j.Result); ok {
				r.Source = src
				return r
			}
		}
		// Refused, not posted, for a reason the table does not know.
		r.Source = generated.SourceHTTP500
		r.Err = fmt.Errorf("HTTP 422 with result %q", j.Result)
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
// and encodes is READ_TIMEOUT (settle it by inquiry).
func success(tx *generated.Transaction, r Result, body []byte, bodyErr error) Result {
	if bodyErr != nil {
		r.Source = generated.SourceReadTimeout
		r.Err = fmt.Errorf("HTTP %d: %w", r.Status, bodyErr)
		return r
	}
	rb := tx.NewResponse()
	if err := decodeSuccess(rb, body); err != nil {
		r.Source = generated.SourceReadTimeout
		r.Err = fmt.Errorf("HTTP %d: %w", r.Status, err)
		return r
	}
	r.Source = generated.SourceHTTP200
	r.Body = rb
	return r
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

// tracer follows one call through the transport (httptrace). GotConn runs
// on the caller's goroutine (inside RoundTrip's getConn); the other hooks
// may run on the transport's goroutines, hence the mutex.
type tracer struct {
	mu       sync.Mutex
	conns    int           // GotConn count; more than 1 would be a retry
	conn     *countingConn // the connection handed over, if ours
	foreign  bool          // a connection not ours (TLS): bytes cannot be counted
	mark     int64
	reused   bool
	dialErr  error
	wroteErr error
	wrote    bool
}

func (t *tracer) clientTrace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			t.mu.Lock()
			defer t.mu.Unlock()
			t.conns++
			if t.conns > 1 {
				return
			}
			t.reused = info.Reused
			if cc, ok := info.Conn.(*countingConn); ok {
				t.conn = cc
				t.mark = cc.mark()
			} else {
				t.foreign = true
			}
		},
		ConnectDone: func(_, _ string, err error) {
			if err != nil {
				t.mu.Lock()
				t.dialErr = err
				t.mu.Unlock()
			}
		},
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			t.mu.Lock()
			t.wrote, t.wroteErr = true, info.Err
			t.mu.Unlock()
		},
	}
}

// retried reports whether the transport handed the call more than one
// connection.
func (t *tracer) retried() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.conns > 1
}

// nothingSent reports, after a call failed without a response, whether no
// byte of the request can have reached the core, sealing the connection it
// was given (see the package comment).
func (t *tracer) nothingSent() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.conns == 0:
		return true
	case t.conns > 1 || t.foreign:
		if t.conn != nil {
			t.conn.sealNothingWritten(t.mark)
		}
		return false
	}
	return t.conn.sealNothingWritten(t.mark)
}

// describe wraps a RoundTrip error with what the trace saw, for the logs.
func (t *tracer) describe(ctx context.Context, err error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var stage string
	switch {
	case t.conns == 0 && t.dialErr != nil:
		stage = "connecting"
	case t.conns == 0:
		stage = "waiting for a connection"
	case t.conns > 1:
		stage = "transport used a second connection (retry)"
	case t.wrote && t.wroteErr == nil:
		stage = "waiting for the answer"
	default:
		stage = "sending the request"
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		// The transport reports a cancelled call in its own words; keep
		// the cause (the deadline, a stopping relay) matchable too.
		return fmt.Errorf("%s: %w (%w)", stage, cause, err)
	}
	return fmt.Errorf("%s: %w", stage, err)
}
