// A tiny LH-STD responder on 127.0.0.1 for tests of channel clients: it
// reads frames with the real wire code and answers each with a proper R
// frame, so that a client is tested over real TCP without the relay.

package testkit

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"lhrelay/internal/fixedwidth"
	"lhrelay/internal/generated"
	"lhrelay/internal/wire"
)

// Handler answers one request frame. It returns the bytes to write back;
// nil closes the connection without answering.
type Handler func(frame []byte) []byte

// Responder is a listening test responder.
type Responder struct {
	Addr string

	handler Handler
	ln      net.Listener
	conns   atomic.Int64
	mu      sync.Mutex
	frames  [][]byte
	wg      sync.WaitGroup
	open    map[net.Conn]struct{}
}

// Start listens on a free port of 127.0.0.1 and serves until the test ends.
// A nil handler answers like a healthy relay: see Answer0000.
func Start(t testing.TB, h Handler) *Responder {
	t.Helper()
	return StartTLS(t, h, nil)
}

// StartTLS is Start serving TLS with cfg, as a relay with --tls-cert does;
// a nil cfg serves plain TCP.
func StartTLS(t testing.TB, h Handler, cfg *tls.Config) *Responder {
	t.Helper()
	if h == nil {
		h = Answer0000
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testkit: listen: %v", err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	return startOn(t, h, ln)
}

func startOn(t testing.TB, h Handler, ln net.Listener) *Responder {
	r := &Responder{Addr: ln.Addr().String(), handler: h, ln: ln, open: make(map[net.Conn]struct{})}
	r.wg.Go(r.accept)
	t.Cleanup(r.Close)
	return r
}

func (r *Responder) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.conns.Add(1)
		r.mu.Lock()
		r.open[c] = struct{}{}
		r.mu.Unlock()
		r.wg.Go(func() { r.serve(c) })
	}
}

func (r *Responder) serve(c net.Conn) {
	defer func() {
		r.mu.Lock()
		delete(r.open, c)
		r.mu.Unlock()
		c.Close()
	}()
	for {
		frame, err := wire.ReadFrame(c, nil)
		var pe *wire.PrefixError
		if errors.As(err, &pe) {
			c.Write(wire.AppendRejection(nil, frame, generated.RspBadFrame, time.Now()))
			return
		}
		if err != nil {
			return
		}
		r.mu.Lock()
		r.frames = append(r.frames, frame)
		r.mu.Unlock()
		out := r.handler(frame)
		if out == nil {
			return
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// Close stops listening, closes the connections and waits for them.
func (r *Responder) Close() {
	r.ln.Close()
	r.mu.Lock()
	for c := range r.open {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// Frames returns a copy of the list of frames received so far.
func (r *Responder) Frames() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.frames...)
}

// Conns is the number of connections accepted so far.
func (r *Responder) Conns() int { return int(r.conns.Load()) }

// Answer0000 answers like a healthy relay: E102 for a frame that does not
// decode, E101 for an unknown transaction, and otherwise 0000 with a sample
// response body (SampleResponse).
func Answer0000(frame []byte) []byte {
	now := time.Now()
	var h generated.Header
	if len(frame) < generated.HeaderLen || h.Decode(string(frame[:generated.HeaderLen])) != nil || h.Flag != generated.FlagRequest {
		return wire.AppendRejection(nil, frame, generated.RspBadFrame, now)
	}
	tx, ok := generated.LookupTransaction(h.TxCode)
	if !ok {
		return wire.AppendRejection(nil, frame, generated.RspUnknownTx, now)
	}
	if err := tx.NewRequest().Decode(string(frame[generated.HeaderLen:])); err != nil {
		return wire.AppendRejection(nil, frame, generated.RspBadFrame, now)
	}
	body, err := SampleResponse(tx, now)
	if err != nil {
		panic(err) // a layout SampleResponse cannot fill: extend it
	}
	out, err := wire.AppendResponse(nil, &h, generated.RspHTTP200, body, now)
	if err != nil {
		panic(err)
	}
	return out
}

// AnswerCode answers every well-formed frame with code and, for 0000, a
// sample body.
func AnswerCode(code generated.RspCode) Handler {
	return func(frame []byte) []byte {
		var h generated.Header
		if err := h.Decode(string(frame[:generated.HeaderLen])); err != nil {
			return wire.AppendRejection(nil, frame, generated.RspBadFrame, time.Now())
		}
		var body generated.ResponseBody
		if code == generated.RspHTTP200 {
			tx, _ := generated.LookupTransaction(h.TxCode)
			body, _ = SampleResponse(tx, time.Now())
		}
		out, err := wire.AppendResponse(nil, &h, code, body, time.Now())
		if err != nil {
			panic(err)
		}
		return out
	}
}

// SampleResponse returns a response body of tx whose every field holds a
// valid value, found by trying "1", a timestamp and "A" in each field until
// the body encodes. It needs no knowledge of the layout.
func SampleResponse(tx *generated.Transaction, now time.Time) (generated.ResponseBody, error) {
	candidates := []string{"1", fixedwidth.FormatTimestamp(now), "A"}
	body := tx.NewResponse()
	fields := body.Fields()
	try := make(map[string]int, len(fields)) // field name → candidate index
	for _, f := range fields {
		if err := body.Set(f.JSON, candidates[0]); err != nil {
			return nil, err
		}
	}
	for range len(fields) * len(candidates) {
		_, err := body.AppendTo(nil)
		if err == nil {
			return body, nil
		}
		var fe *fixedwidth.FieldError
		if !errors.As(err, &fe) {
			return nil, err
		}
		try[fe.Field]++
		if try[fe.Field] >= len(candidates) {
			return nil, fmt.Errorf("testkit: no sample value fits %s: %w", fe.Field, err)
		}
		for _, f := range fields {
			if f.Name == fe.Field {
				// A candidate a numeric field cannot parse is skipped the same way.
				for body.Set(f.JSON, candidates[try[fe.Field]]) != nil {
					try[fe.Field]++
					if try[fe.Field] >= len(candidates) {
						return nil, fmt.Errorf("testkit: no sample value fits %s: %w", fe.Field, err)
					}
				}
			}
		}
	}
	return nil, fmt.Errorf("testkit: cannot fill a %s response", tx.Code)
}
