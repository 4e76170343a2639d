package corecall

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http/httptrace"
	"sync"
)

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
		TLSHandshakeDone: func(_ tls.ConnectionState, err error) {
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
	case t.conns == 1 && !t.reused && t.conn != nil && t.conn.refusedCert():
		// A TLS 1.3 core refused the relay's certificate: its handshake
		// failed, whatever was written (see dialTLS).
		t.conn.sealNothingWritten(t.mark)
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
