package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"lhrelay/internal/breaker"
	"lhrelay/internal/cliflag"
	"lhrelay/internal/corecall"
	"lhrelay/internal/ledger"
	"lhrelay/internal/metrics"
	"lhrelay/internal/settle"
)

// settleOptions are the flags of the relay's own settling (SPEC §5.11):
// resolve's rules, run in the background.
type settleOptions struct {
	every, minAge, staleSent time.Duration
}

func (so *settleOptions) addFlags(fs *flag.FlagSet) {
	cliflag.SecondsVar(fs, &so.every, "settle-every", settle.DefaultEvery, "`seconds` between the relay's settling rounds, which settle UNKNOWN and orphaned SENT rows by resolve's rules (never resending anything); 0 turns settling off")
	cliflag.SecondsVar(fs, &so.minAge, "settle-min-age", settle.DefaultMinAge, "`seconds` an UNKNOWN row must be old before settling looks it up (the core may still be posting a younger one), as resolve --min-age")
	cliflag.SecondsVar(fs, &so.staleSent, "stale-sent", settle.DefaultStaleSent, "`seconds` after which settling takes a SENT row for orphaned by a relay that died mid-call, as resolve --stale-sent; 0: leave SENT rows to resolve")
}

// check refuses a --stale-sent within --timeout: a SENT row that young may
// be this relay's own call still under way, and looking it up could settle
// it while the core is still posting it.
func (so *settleOptions) check(timeout time.Duration) error {
	if so.every > 0 && so.staleSent > 0 && so.staleSent <= timeout+stopMargin {
		return fmt.Errorf("--stale-sent %ss: must be more than --timeout plus %ss (%ss), or a call still under way could be settled", cliflag.FormatSeconds(so.staleSent), cliflag.FormatSeconds(stopMargin), cliflag.FormatSeconds(timeout+stopMargin))
	}
	return nil
}

// start starts settling in the background when --settle-every is on, and
// returns the function that stops it and waits for the round under way.
func (so *settleOptions) start(ctx context.Context, o options, lk *links, led *ledger.Ledger, m *metrics.Metrics, log *slog.Logger) (stop func(), err error) {
	if so.every == 0 {
		return func() {}, nil
	}
	// A client of its own: a slow lookup holds none of the frames'
	// connections to the core.
	core, err := corecall.New(corecall.Config{
		BaseURL: o.core, Timeout: o.timeout, ConnectTimeout: o.connectTimeout, MaxIdleConns: 2, TLS: lk.coreTLS,
	})
	if err != nil {
		return nil, fmt.Errorf("--core: %w", err)
	}
	cfg := settle.Config{
		Ledger: led, Core: core, Every: so.every, MinAge: so.minAge, StaleSent: so.staleSent,
		CoreDown: func() bool { return lk.breaker.State() == breaker.Open },
		Log:      log.With("component", "settle"),
	}
	if m != nil {
		cfg.Metrics = m
	}
	s, err := settle.New(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
		core.CloseIdleConnections()
	}, nil
}
