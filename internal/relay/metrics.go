package relay

import (
	"context"
	"errors"
	"time"

	"lhrelay/internal/generated"
)

// Metrics receives the relay's measurements as they happen;
// *metrics.Metrics (internal/metrics) implements it. Config.Metrics nil
// means none are taken.
//
// Every method is on the hot path and must be cheap and safe for concurrent
// use. A frame is counted by FrameAnswered before its answer is written, so
// a channel that has read its answer finds it counted.
type Metrics interface {
	// FrameAnswered counts one answered frame. txCode is the TX_CODE as
	// received, registered or not: the implementation must bound its labels.
	FrameAnswered(txCode string, rsp generated.RspCode)
	// CoreCalled records one core call: how it ended and how long it took.
	CoreCalled(txCode string, outcome generated.Source, elapsed time.Duration)
	// FrameStarted and FrameEnded bracket a frame from its first byte to
	// its answer being ready (or the frame being dropped).
	FrameStarted()
	FrameEnded()
	// ConnOpened and ConnClosed bracket an admitted channel connection.
	ConnOpened()
	ConnClosed()
	// ConnRejected counts a connection refused by MaxConns.
	ConnRejected()
	// ConnOverShare counts a connection refused by MaxConnsPerAddr.
	ConnOverShare()
	// ConnNotAllowed counts a connection refused by Allow.
	ConnNotAllowed()
	// CallShed counts a frame the limiter did not admit to a core call,
	// by reason (admit.Reason).
	CallShed(reason string)
	// CallAdmitted observes how long an admitted call waited for its slot.
	CallAdmitted(wait time.Duration)
	// TLSHandshakeFailed counts a channel connection closed because its
	// TLS handshake failed.
	TLSHandshakeFailed()
}

// ErrStopping is what Ready reports once Shutdown or Close has begun.
var ErrStopping = errors.New("relay: stopping")

// pinger is a ledger that can say whether it is usable (*ledger.Ledger).
type pinger interface {
	Ping(ctx context.Context) error
}

// Ready reports whether the relay can take frames, for a readiness probe
// (/readyz): it is not stopping, its core breaker is not open, and its
// ledger, if it has one that can be pinged, answers a read and a round
// trip through its writer.
func (s *Server) Ready(ctx context.Context) error {
	if s.stopFlag.Load() {
		return ErrStopping
	}
	if err := s.breakerReady(); err != nil {
		return err
	}
	if err := s.room(); err != nil {
		return err
	}
	if p, ok := s.ledger.(pinger); ok {
		if err := p.Ping(ctx); err != nil {
			// The probe's answer may be read by anyone who reaches the
			// metrics port; the database's error names its user, host and
			// port, so it goes to the log only.
			if everySecond(&s.lastPingLog) {
				s.log.Warn("not ready: the ledger does not answer", "err", err)
			}
			return ErrLedgerDown
		}
	}
	return nil
}

// ErrLedgerDown is what Ready reports while the ledger does not answer.
var ErrLedgerDown = errors.New("relay: the ledger does not answer (see the relay's log)")

func (s *Server) frameStarted() {
	s.inFlight.Add(1)
	if s.metrics != nil {
		s.metrics.FrameStarted()
	}
}

func (s *Server) frameEnded() {
	s.inFlight.Add(-1)
	if s.metrics != nil {
		s.metrics.FrameEnded()
	}
}
