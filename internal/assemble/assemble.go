// Package assemble puts together a running relay: the core client, the
// ledger with its replication watch, the relay server listening, its
// metrics, and the background settler. The relay, sandbox and demo
// commands each start theirs here, so that a relay in a demo is wired as
// the one in production and a change to the wiring is made once.
//
// Flags and their checks stay with the commands; what Start is given is
// already valid. An error from Start is app.Bad (exit 2): every part it
// builds is named by a setting, and the error names it.
package assemble

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"lhrelay/internal/admit"
	"lhrelay/internal/app"
	"lhrelay/internal/breaker"
	"lhrelay/internal/corecall"
	"lhrelay/internal/ledger"
	"lhrelay/internal/metrics"
	"lhrelay/internal/relay"
	"lhrelay/internal/replwatch"
	"lhrelay/internal/settle"
	"lhrelay/internal/tlsconf"
)

// Config is a relay to start. Zero values take the relay's and the core
// client's defaults; nil parts are left out.
type Config struct {
	// Listen is the channels' host:port; ListenFlag names the setting it
	// came from, for the error when it cannot be bound (none: the address).
	Listen, ListenFlag string

	Core           string      // the core's base URL
	CoreTLS        *tls.Config // nil: the system's roots
	Timeout        time.Duration
	ConnectTimeout time.Duration

	// DB is the ledger opened (with LedgerOptions) and closed by the
	// relay, its replication checked and watched; or Ledger, opened and
	// closed by the caller (several relays sharing one), used as is.
	DB            string
	LedgerOptions []ledger.Option
	Ledger        *ledger.Ledger
	AllowAsync    bool // --allow-async-replication

	// The channel side, as relay.Config has it.
	FrameTimeout, IdleTimeout time.Duration
	MaxConns, MaxConnsPerAddr int
	StopArrival               time.Duration
	ChannelTLS                *tls.Config
	Allow                     []netip.Prefix
	ClientOrgs                *relay.ClientOrgs
	Breaker                   *breaker.Breaker
	Limiter                   *admit.Limiter
	Certs                     func() []tlsconf.Cert // the certificates in force, for the metrics

	// Metrics, when not nil, counts the relay's frames; with MetricsAddr
	// it is also served there with /healthz and /readyz.
	Metrics     *metrics.Metrics
	MetricsAddr string

	// Settle, when Every is more than 0, settles UNKNOWN and orphaned
	// SENT rows in the background (SPEC §5.11).
	Settle settle.Config

	Log *slog.Logger
}

// Relay is a relay started by Start, serving until Stop or Close.
type Relay struct {
	srv      *relay.Server
	ln       net.Listener
	led      *ledger.Ledger
	ownsLed  bool
	metrics  *http.Server
	mAddr    net.Addr
	served   chan error
	log      *slog.Logger
	stopBack []func() // background parts, stopped in reverse order
}

// Start builds what cfg describes and starts serving. On error nothing is
// left running.
func Start(ctx context.Context, cfg Config) (*Relay, error) {
	r := &Relay{led: cfg.Ledger, served: make(chan error, 1), log: cfg.Log}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if err := r.start(ctx, cfg); err != nil {
		r.closeBackground()
		return nil, app.Bad(err)
	}
	return r, nil
}

func (r *Relay) start(ctx context.Context, cfg Config) error {
	log := r.log
	core, err := corecall.New(corecall.Config{
		BaseURL:        cfg.Core,
		Timeout:        cfg.Timeout,
		ConnectTimeout: cfg.ConnectTimeout,
		MaxIdleConns:   cfg.MaxConns, // one call per connection at most
		TLS:            cfg.CoreTLS,
		Log:            log,
	})
	if err != nil {
		return fmt.Errorf("--core: %w", err)
	}
	if w := core.PathWarning(); w != "" {
		log.Warn("--core: "+w, "core", cfg.Core)
	}
	var repl *replwatch.Watcher
	if r.led == nil {
		if repl, err = r.openLedger(ctx, cfg, log); err != nil {
			return err
		}
	}
	rcfg := relay.Config{
		Core:            core,
		Ledger:          r.led,
		FrameTimeout:    cfg.FrameTimeout,
		IdleTimeout:     cfg.IdleTimeout,
		MaxConns:        cfg.MaxConns,
		MaxConnsPerAddr: cfg.MaxConnsPerAddr,
		Logger:          log,
		TLS:             cfg.ChannelTLS,
		Allow:           cfg.Allow,
		ClientOrgs:      cfg.ClientOrgs,
		Breaker:         cfg.Breaker,
		Limiter:         cfg.Limiter,
		StopArrival:     cfg.StopArrival,
	}
	if m := cfg.Metrics; m != nil {
		if r.ownsLed {
			m.LedgerLinkUnverified(r.led.Link() == ledger.LinkUnverified)
			m.WatchLedger(r.led)
			m.WatchReplication(repl)
		}
		if cfg.Breaker != nil {
			m.WatchBreaker(cfg.Breaker)
		}
		if cfg.Limiter != nil {
			m.WatchLimiter(cfg.Core, cfg.Limiter)
		}
		if cfg.Certs != nil {
			m.WatchCerts(cfg.Certs)
		}
		m.SettleEvery(cfg.Settle.Every)
		rcfg.Metrics = m
	}
	if err := r.startSettling(ctx, cfg, log); err != nil {
		return err
	}
	srv, err := relay.New(rcfg)
	if err != nil {
		return err
	}
	r.srv = srv
	if r.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		if cfg.ListenFlag == "" {
			return err // net's error names the address
		}
		return fmt.Errorf("%s: %w", cfg.ListenFlag, err)
	}
	if cfg.Metrics != nil && cfg.MetricsAddr != "" {
		ready := func(ctx context.Context) error {
			if err := r.srv.Ready(ctx); err != nil {
				return err
			}
			if repl != nil {
				return repl.Ready()
			}
			return nil
		}
		if r.metrics, r.mAddr, err = cfg.Metrics.Serve(cfg.MetricsAddr, ready, log); err != nil {
			r.ln.Close()
			return fmt.Errorf("--metrics-addr: %w", err)
		}
	}
	go func() { r.served <- r.srv.Serve(r.ln) }()
	return nil
}

// openLedger opens cfg.DB, refuses a replication cfg does not allow, and
// watches it (on every store, so that the series exist everywhere: a
// SQLite ledger has no standbys and its check reads nothing).
func (r *Relay) openLedger(ctx context.Context, cfg Config, log *slog.Logger) (*replwatch.Watcher, error) {
	led, err := ledger.Open(cfg.DB, cfg.LedgerOptions...)
	if err != nil {
		return nil, fmt.Errorf("--db: %w", err)
	}
	r.led, r.ownsLed = led, true
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = led.CheckReplication(cctx, cfg.AllowAsync)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("--db: %w", err)
	}
	repl := replwatch.New(led, cfg.AllowAsync, log.With("component", "replication"))
	repl.Check(ctx)
	wctx, stopWatching := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		repl.Run(wctx, replwatch.DefaultEvery)
	}()
	r.stopBack = append(r.stopBack, func() { stopWatching(); <-watched })
	if led.Link() == ledger.LinkUnverified {
		log.Warn("the link to the ledger is not verified: a host other than the loopback, reached in plaintext or without checking its certificate, as --db's sslmode states; whoever sits on that link can rewrite the ledger (SPEC 6a)", "db", led.Path())
	}
	return repl, nil
}

// startSettling starts the settler when cfg.Settle.Every is on, with a
// core client of its own: a slow lookup holds none of the frames'
// connections to the core.
func (r *Relay) startSettling(ctx context.Context, cfg Config, log *slog.Logger) error {
	if cfg.Settle.Every == 0 {
		return nil
	}
	core, err := corecall.New(corecall.Config{
		BaseURL: cfg.Core, Timeout: cfg.Timeout, ConnectTimeout: cfg.ConnectTimeout, MaxIdleConns: settle.DefaultInFlight, TLS: cfg.CoreTLS,
	})
	if err != nil {
		return fmt.Errorf("--core: %w", err)
	}
	sc := cfg.Settle
	sc.Ledger, sc.Core = r.led, core
	if sc.Limiter == nil {
		sc.Limiter = cfg.Limiter // the frames' admission: the lookups count against the core's bound too
	}
	if b := cfg.Breaker; b != nil && sc.CoreDown == nil {
		sc.CoreDown = func() bool { return b.State() == breaker.Open }
	}
	sc.Log = log.With("component", "settle")
	if cfg.Metrics != nil {
		sc.Metrics = cfg.Metrics
	}
	s, err := settle.New(sc)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(sctx)
	}()
	r.stopBack = append(r.stopBack, func() {
		cancel()
		<-done
		core.CloseIdleConnections()
	})
	return nil
}

// Addr is where the relay listens for channels.
func (r *Relay) Addr() net.Addr { return r.ln.Addr() }

// MetricsAddr is where the metrics are served, nil when they are not.
func (r *Relay) MetricsAddr() net.Addr { return r.mAddr }

// Server is the relay server, for what the assembly does not wrap
// (readiness, WaitRecorded, the per-address bound in force).
func (r *Relay) Server() *relay.Server { return r.srv }

// Ledger is the relay's ledger.
func (r *Relay) Ledger() *ledger.Ledger { return r.led }

// Failed delivers the error that ended serving before a stop was asked.
func (r *Relay) Failed() <-chan error { return r.served }

// Stop stops the relay gracefully within ctx (frames in flight finish
// and are recorded), then the rest as Close does. Its error is a stop cut
// short; a ledger that fails to close is logged.
func (r *Relay) Stop(ctx context.Context) error {
	err := r.srv.Shutdown(ctx)
	if err == nil {
		<-r.served
	}
	r.closeRest()
	return err
}

// Close stops the relay at once, then the rest: the metrics (closed after
// the relay, so that /readyz answers 503 while it drains), the settler's
// round under way, the replication watch and, last, the ledger it opened,
// when nothing can still be recording.
func (r *Relay) Close() {
	r.srv.Close()
	r.closeRest()
}

func (r *Relay) closeRest() {
	if r.metrics != nil {
		r.metrics.Close()
	}
	r.closeBackground()
}

func (r *Relay) closeBackground() {
	for i := len(r.stopBack) - 1; i >= 0; i-- {
		r.stopBack[i]()
	}
	r.stopBack = nil
	if r.ownsLed {
		r.ownsLed = false
		if err := r.led.Close(); err != nil {
			r.log.Error("closing the ledger", "err", err)
		}
	}
}
