package relay

import (
	"context"
	"errors"
	"net/http"
	"time"

	"lhrelay/internal/admit"
	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

// answerFromRead answers a frame that may not claim its GUID — shed by the
// limiter, or whose claim could not be written (a full disk, a read-only
// database) — with what its row says, read without a write (Peek): a DONE
// row is replayed, a SENT row is E903, an UNKNOWN row E901, a different
// request E904, as a claim would answer. Only a GUID that needs a claim (no
// row, or a FAILED row) gets E902, which is true: nothing was sent, and no
// row was written for it. cause is why no claim was made.
func (c *conn) answerFromRead(st *frameState, r ledger.Request, cause error) []byte {
	s := c.s
	st.err = cause
	if s.ledger == nil {
		return c.answer(st, generated.SourceConnectFail, ledger.Why{}).Response
	}
	ctx, cancel := context.WithTimeout(s.base, s.ledgerTimeout)
	defer cancel()
	claim, err := s.ledger.Peek(ctx, r)
	if err != nil {
		st.err = errors.Join(cause, err)
		return c.answer(st, generated.SourceConnectFail, ledger.Why{}).Response
	}
	st.state, st.attempts = claim.State, claim.Attempts
	if claim.Outcome == ledger.NeedsClaim {
		return c.answer(st, generated.SourceConnectFail, ledger.Why{}).Response
	}
	st.claim = claim.Outcome
	st.stage = stageNotOwned
	return c.notOwned(st, claim)
}

// release gives back the frame's admitted slot, once, telling the limiter
// what the call showed of the core's latency (took: the call's own
// duration).
func (c *conn) release(st *frameState, s admit.Sample, took time.Duration) {
	if st.admitted {
		st.admitted = false
		st.permit.Done(s, took)
	}
}

// sample is what a call says about the core's latency: an answer's time
// counts, a timeout counts as the whole timeout, a 503 or 429 is the core
// at its capacity, and a call that was not made, could not connect or was
// cut short by a stopping relay says nothing.
func (s *Server) sample(res corecall.Result, sent bool) admit.Sample {
	switch {
	case !sent || context.Cause(s.base) != nil:
		return admit.Ignored
	case errors.Is(res.Err, context.DeadlineExceeded):
		return admit.TimedOut
	case res.Source == generated.SourceConnectFail:
		return admit.Ignored
	case res.Status == http.StatusServiceUnavailable || res.Status == http.StatusTooManyRequests:
		// The core (or its gateway) says it is at its capacity: an
		// answer (E500, nothing posted), and the limiter's sign of the
		// capacity of a core that refuses instead of queueing.
		return admit.Refused
	}
	return admit.Answered
}

func (s *Server) callShed(err error) {
	var se *admit.ShedError
	if s.metrics != nil && errors.As(err, &se) {
		s.metrics.CallShed(string(se.Reason))
	}
}

func (s *Server) callAdmitted(wait time.Duration) {
	if s.metrics != nil && s.limiter != nil {
		s.metrics.CallAdmitted(wait)
	}
}
