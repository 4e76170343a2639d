package relay

import (
	"context"
	"fmt"
	"net/http"

	"lhrelay/internal/breaker"
	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
)

// callCore makes the core call through the breaker (Config.Breaker). While
// the breaker is open it sends nothing and returns CONNECT_FAIL at once —
// true, since nothing was sent — which the caller answers and records as
// any E902 (FAILED/E902, for reprocess to send again); sent is then false.
func (s *Server) callCore(call *corecall.Prepared) (res corecall.Result, sent bool) {
	done, err := s.breaker.Allow()
	if err != nil {
		return corecall.Result{Source: generated.SourceConnectFail, Err: err}, false
	}
	res = s.core.Send(s.base, call)
	done(s.verdict(res))
	return res, true
}

// verdict is what a call says about the core: a call that got no answer
// (it could not connect; or it connected, then timed out or lost the
// connection; or a gateway in front of the core answered 504 for it)
// counts towards the breaker (package breaker). Any answer of the core's
// own — B2xx, E500, a 200 that does not decode — means the core is there.
// A connection refused on a reused keep-alive connection, or a call cut
// short by a stopping relay, says nothing either way.
func (s *Server) verdict(res corecall.Result) breaker.Verdict {
	switch {
	case context.Cause(s.base) != nil:
		return breaker.Excluded
	case res.Source == generated.SourceConnectFail && res.ConnReused:
		return breaker.Excluded
	case res.Source == generated.SourceConnectFail:
		return breaker.ConnectFailure
	case res.Status == 0 || res.Status == http.StatusGatewayTimeout:
		return breaker.Failure
	}
	return breaker.Success
}

// breakerReady is the breaker's part of Ready: not ready while it is open,
// so that a load balancer sends channels to a relay that can reach its
// core. Half-open is ready: the probe needs a frame.
func (s *Server) breakerReady() error {
	if s.breaker.State() == breaker.Open {
		return fmt.Errorf("relay: core breaker open for %s: %s", s.breaker.Name(), s.breaker.Why())
	}
	return nil
}
