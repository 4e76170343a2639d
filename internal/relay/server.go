package relay

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"lhrelay/internal/admit"
	"lhrelay/internal/breaker"
	"lhrelay/internal/corecall"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultFrameTimeout = 10 * time.Second
	DefaultIdleTimeout  = 300 * time.Second
	DefaultMaxConns     = 1024
	// DefaultPerAddrDivisor sets the share of MaxConns one remote address
	// may hold when Config.MaxConnsPerAddr is zero: MaxConns divided by it,
	// a half. A channel gateway or load balancer puts many channels behind
	// one address, so the share must be large enough for all of them; a
	// half still leaves the other half to everyone else, so one address
	// alone (a gateway gone wrong, a hostile client behind it) can never
	// lock every other channel out.
	DefaultPerAddrDivisor = 2
	// defaultNoRoomFor is how long Ready says "no room" after a connection
	// was last refused by MaxConns: connections come and go under a flood,
	// and a probe landing between two refusals must still see it.
	defaultNoRoomFor = 5 * time.Second
	// DefaultLedgerTimeout bounds a ledger write that must happen even while
	// the server stops (recording an outcome). It is above the ledger's own
	// busy timeout, so a slow disk is waited for rather than abandoned.
	DefaultLedgerTimeout = 30 * time.Second
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("relay: server closed")

// errHardStop is the cause given to core calls cancelled because Shutdown's
// context ended or Close was called.
var errHardStop = errors.New("relay: stopping: call cancelled")

// Config configures a Server.
type Config struct {
	// Core makes the core calls. Required.
	Core *corecall.Client
	// Ledger records each request (SPEC §6). Nil means no ledger: no
	// idempotency, every valid frame calls the core.
	Ledger Ledger
	// FrameTimeout: a frame must arrive whole within this long of its first
	// byte, and an answer must be written within it. Zero means
	// DefaultFrameTimeout.
	FrameTimeout time.Duration
	// IdleTimeout: a connection with no frame started for this long is
	// closed. Zero means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxConns bounds the open channel connections (see the package
	// comment for what happens past it). Zero means DefaultMaxConns.
	MaxConns int
	// MaxConnsPerAddr bounds the open connections from one remote address,
	// so that one address cannot take every slot of MaxConns. Zero means
	// MaxConns / DefaultPerAddrDivisor; MaxConns (or more) turns the share
	// off.
	MaxConnsPerAddr int
	// LedgerTimeout bounds recording an outcome. Zero means
	// DefaultLedgerTimeout.
	LedgerTimeout time.Duration
	// Logger receives the server's log (package comment, Logs). Nil means
	// slog.Default().
	Logger *slog.Logger
	// Metrics receives the server's measurements; *metrics.Metrics
	// implements it. Nil means none are taken.
	Metrics Metrics
	// Now is the relay's clock, for SENT_AT. Nil means time.Now.
	Now func() time.Time
	// TLS, when set, serves channels over TLS with it (see conn.handshake);
	// with ClientAuth set to require and verify, a channel without a
	// valid client certificate is closed unread.
	TLS *tls.Config
	// Breaker, when set, stops calling a core that keeps failing to
	// connect or timing out (see callCore). Nil means every call is made.
	Breaker *breaker.Breaker
	// Limiter, when set, bounds the core calls in flight and sheds the
	// frames it does not admit (package comment, Overload). Nil admits
	// every call.
	Limiter *admit.Limiter
	// ClientOrgs, when set, binds each channel's client certificate to the
	// SRC_ORG values it may send (clientorg.go); TLS must then require
	// client certificates. Nil: any SRC_ORG.
	ClientOrgs *ClientOrgs
	// Allow, when not empty, lists the networks channels may connect from;
	// a connection from elsewhere is closed unread (see allowed).
	Allow []netip.Prefix
	// StopArrival bounds how long after Shutdown begins a frame still
	// arriving may take to arrive whole (SPEC 5.8: the stop's bound,
	// --timeout); one that has not is dropped then, not when Shutdown's
	// context ends. Zero: until the context ends.
	StopArrival time.Duration
}

// Server is an LH-STD relay server. Make one with New, run it with Serve,
// stop it with Shutdown.
type Server struct {
	core          *corecall.Client
	ledger        Ledger
	frameTimeout  time.Duration
	idleTimeout   time.Duration
	maxConns      int
	maxPerAddr    int
	noRoomFor     time.Duration // see defaultNoRoomFor
	ledgerTimeout time.Duration
	log           *slog.Logger
	metrics       Metrics // nil: none
	now           func() time.Time
	tls           *tls.Config    // nil: plain TCP
	allow         []netip.Prefix // empty: every address
	clientOrgs    *ClientOrgs    // nil: any SRC_ORG
	breaker       *breaker.Breaker
	limiter       *admit.Limiter // nil: every call admitted
	stopArrival   time.Duration  // 0: Shutdown's deadline

	// base is the parent of every claim and core call. It is cancelled only
	// by a hard stop, never by a graceful one: frames in flight finish.
	base       context.Context
	cancelBase context.CancelCauseFunc
	// lasting is base without its cancellation, built once: the parent
	// of the ledger writes that must finish even after a hard stop
	// (bounded by LedgerTimeout).
	lasting context.Context

	// stopFlag mirrors stopping for the connections' hot path (toIdle).
	stopFlag atomic.Bool

	mu        sync.Mutex // guards the fields below
	stopping  bool
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	perAddr   map[netip.Addr]int // open connections by remote address
	wg        sync.WaitGroup     // one per connection goroutine; Add under mu while !stopping

	rejected         atomic.Int64 // connections refused by MaxConns
	lastFull         atomic.Int64 // unix nanos of the last MaxConns refusal
	overShare        atomic.Int64 // connections refused by MaxConnsPerAddr
	lastShareLog     atomic.Int64 // unix nanos of the last MaxConnsPerAddr refusal log line
	notAllowed       atomic.Int64 // connections refused by Allow
	lastDenyLog      atomic.Int64 // unix nanos of the last Allow refusal log line
	lastRejLog       atomic.Int64 // unix nanos of the last rejection log line
	handshakeFailed  atomic.Int64 // channel TLS handshakes that failed
	lastHandshakeLog atomic.Int64 // unix nanos of the last such log line
	lastPingLog      atomic.Int64 // unix nanos of the last not-ready log line
	claimFailed      atomic.Int64 // claims the ledger failed to write
	lastClaimLog     atomic.Int64 // unix nanos of the last such log line
	silent           atomic.Int64 // connections closed for sending nothing within firstFrameTimeout
	lastSilentLog    atomic.Int64 // unix nanos of the last such log line
	inFlight         atomic.Int64 // frames from their first byte to their answer being ready
	handling         atomic.Int64 // frames from being whole to their answer being ready
	// droppedAtStop counts frames that had not arrived whole when the
	// server stopped, dropped unprocessed.
	droppedAtStop atomic.Int64
	recording     *recordings // outcomes queued with FinishLater, not yet recorded

	// hook, when set (tests only), is called at each stage of a frame.
	hook func(stage)
	// connDone, when set (tests only), is called when a connection's
	// goroutine has ended and the connection no longer counts.
	connDone func()
}

// New checks cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Core == nil {
		return nil, errors.New("relay: no core client")
	}
	if cfg.ClientOrgs != nil && (cfg.TLS == nil || (cfg.TLS.ClientAuth != tls.RequireAndVerifyClientCert && cfg.TLS.GetConfigForClient == nil)) {
		return nil, errors.New("relay: client SRC_ORG bindings need TLS with client certificates")
	}
	if cfg.FrameTimeout < 0 || cfg.IdleTimeout < 0 || cfg.MaxConns < 0 || cfg.MaxConnsPerAddr < 0 || cfg.LedgerTimeout < 0 || cfg.StopArrival < 0 {
		return nil, errors.New("relay: negative timeout or connection limit")
	}
	s := &Server{
		core:          cfg.Core,
		ledger:        cfg.Ledger,
		frameTimeout:  cmp.Or(cfg.FrameTimeout, DefaultFrameTimeout),
		idleTimeout:   cmp.Or(cfg.IdleTimeout, DefaultIdleTimeout),
		maxConns:      cmp.Or(cfg.MaxConns, DefaultMaxConns),
		ledgerTimeout: cmp.Or(cfg.LedgerTimeout, DefaultLedgerTimeout),
		log:           cfg.Logger,
		metrics:       cfg.Metrics,
		now:           cfg.Now,
		tls:           cfg.TLS,
		allow:         cfg.Allow,
		clientOrgs:    cfg.ClientOrgs,
		breaker:       cfg.Breaker,
		limiter:       cfg.Limiter,
		stopArrival:   cfg.StopArrival,
		listeners:     map[net.Listener]struct{}{},
		conns:         map[*conn]struct{}{},
		perAddr:       map[netip.Addr]int{},
		noRoomFor:     defaultNoRoomFor,
		recording:     newRecordings(),
	}
	s.maxPerAddr = cfg.MaxConnsPerAddr
	if s.maxPerAddr == 0 {
		s.maxPerAddr = max(s.maxConns/DefaultPerAddrDivisor, 1)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.base, s.cancelBase = context.WithCancelCause(context.Background())
	s.lasting = context.WithoutCancel(s.base)
	return s, nil
}

// Serve accepts channel connections on ln and serves each on its own
// goroutine until Shutdown or Close, then returns ErrServerClosed. Any other
// accept error ends it too (temporary ones are retried). ln is closed when
// Serve returns.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()

	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isStopping() {
				return ErrServerClosed
			}
			if retryableAccept(err) {
				// Out of file descriptors or the like: wait and retry, as
				// net/http does, instead of spinning or giving up.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("relay: accept: %w", err)
		}
		backoff = 0
		s.admit(nc)
	}
}

// admit starts serving nc, or closes it at once when MaxConns connections
// are open or the server is stopping.
func (s *Server) admit(nc net.Conn) {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if !s.allowed(nc) {
		s.mu.Unlock()
		return
	}
	if len(s.conns) >= s.maxConns {
		s.mu.Unlock()
		// Not a byte has been read: closing now means nothing was done
		// with whatever the channel sent (package comment, MaxConns).
		n := s.rejected.Add(1)
		s.lastFull.Store(time.Now().UnixNano())
		if s.metrics != nil {
			s.metrics.ConnRejected()
		}
		s.logRejected(nc, n)
		nc.Close() // after the count and the log line, as allowed does
		return
	}
	addr := remoteAddr(nc)
	if s.perAddr[addr] >= s.maxPerAddr {
		s.mu.Unlock()
		n := s.overShare.Add(1)
		if s.metrics != nil {
			s.metrics.ConnOverShare()
		}
		if everySecond(&s.lastShareLog) {
			s.log.Warn("connection refused: this address holds its share of max-conns", "remote", nc.RemoteAddr().String(), "max_conns_per_addr", s.maxPerAddr, "refused_total", n)
		}
		nc.Close()
		return
	}
	s.perAddr[addr]++
	if s.tls != nil {
		nc = tls.Server(nc, s.tls)
	}
	c := newConn(s, nc)
	c.addr = addr
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	if s.metrics != nil {
		s.metrics.ConnOpened()
	}
	go c.serve()
}

// logRejected logs connections refused by MaxConns, at most once a second,
// so a flood cannot turn into a flood of log lines.
func (s *Server) logRejected(nc net.Conn, n int64) {
	if !everySecond(&s.lastRejLog) {
		return
	}
	s.log.Warn("connection refused: max-conns reached", "remote", nc.RemoteAddr().String(), "max_conns", s.maxConns, "refused_total", n)
}

// everySecond reports whether a rate-limited log line may be written now:
// true at most once a second for each last (unix nanos of the last line),
// so that a flood of refusals cannot become a flood of log lines.
func everySecond(last *atomic.Int64) bool {
	now := time.Now().UnixNano()
	l := last.Load()
	return now-l >= int64(time.Second) && last.CompareAndSwap(l, now)
}

// ErrNoRoom is what Ready reports while connections are refused for want
// of room: MaxConns connections are open, or one was refused so lately
// that the next one may be.
var ErrNoRoom = errors.New("relay: no room for more channel connections (max-conns)")

// room reports ErrNoRoom while MaxConns refuses connections (see
// defaultNoRoomFor).
func (s *Server) room() error {
	if s.Conns() >= s.maxConns || time.Since(time.Unix(0, s.lastFull.Load())) < s.noRoomFor {
		return ErrNoRoom
	}
	return nil
}

// Rejected returns how many connections MaxConns has refused so far.
func (s *Server) Rejected() int64 { return s.rejected.Load() }

// MaxConnsPerAddr is the share of MaxConns in force for one address.
func (s *Server) MaxConnsPerAddr() int { return s.maxPerAddr }

// OverShare returns how many connections MaxConnsPerAddr has refused so far.
func (s *Server) OverShare() int64 { return s.overShare.Load() }

// Conns returns how many channel connections are open.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// retryableAccept reports accept errors that pass: out of file descriptors,
// or a connection aborted before it was accepted.
func retryableAccept(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

func (s *Server) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// forget is called by a connection's goroutine when it ends.
func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	if s.perAddr[c.addr]--; s.perAddr[c.addr] <= 0 {
		delete(s.perAddr, c.addr)
	}
	s.mu.Unlock()
	if s.metrics != nil {
		s.metrics.ConnClosed()
	}
	if s.connDone != nil {
		s.connDone()
	}
	s.wg.Done()
}

// beginStop marks the server stopping, closes its listeners and returns the
// connections open at that moment. From then on no connection is admitted
// and none starts a new frame.
func (s *Server) beginStop() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	s.stopFlag.Store(true)
	for ln := range s.listeners {
		ln.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}

// Shutdown stops the server gracefully: it stops accepting, closes idle
// connections, and waits for the frames in flight to be answered and for
// every outcome answered to be recorded. A frame still arriving has until
// ctx's deadline (or Config.StopArrival, if sooner) to arrive whole (and is then served); one that does not
// was never processed and is dropped with its connection (SPEC 5.8), which
// leaves the stop clean. If ctx ends while whole frames are still being
// handled, it cancels their core calls (each is classified and recorded as
// any failed call), closes every connection, waits for their goroutines to
// finish, and returns ctx's error.
//
// It logs a line when it begins (the frames in flight) and one when it is
// done ("relay stopped": how many frames were finished, dropped before
// they arrived, or cut short, and how long it took).
func (s *Server) Shutdown(ctx context.Context) error {
	start := time.Now()
	conns := s.beginStop()
	inFlight := s.inFlight.Load()
	attrs := []any{"in_flight", inFlight, "open_conns", len(conns)}
	arriveBy, ok := ctx.Deadline()
	if ok {
		attrs = append(attrs, "grace_ms", millis(time.Until(arriveBy)))
	}
	if s.stopArrival > 0 {
		if b := start.Add(s.stopArrival); arriveBy.IsZero() || b.Before(arriveBy) {
			arriveBy = b
		}
	}
	s.log.Info("relay stopping: not accepting; finishing the frames in flight", attrs...)
	for _, c := range conns {
		c.stop(arriveBy)
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		s.recording.wait()
		close(done)
	}()
	cut := int64(0)
	select {
	case <-done:
	case <-ctx.Done():
		cut = s.hardStop()
		<-done
	}
	dropped := s.droppedAtStop.Load()
	if cut == 0 {
		s.log.Info("relay stopped", "in_flight_finished", max(inFlight-dropped, 0), "dropped_unarrived", dropped, "took_ms", millis(time.Since(start)))
		return nil
	}
	s.log.Error("relay stopped: stop cut short; remaining core calls cancelled and recorded as failed calls (E901/E902)",
		"in_flight_finished", max(inFlight-cut-dropped, 0), "in_flight_cut_short", cut, "dropped_unarrived", dropped, "took_ms", millis(time.Since(start)), "err", ctx.Err())
	return ctx.Err()
}

// WaitRecorded returns once every outcome answered so far is recorded in
// the ledger, or its recording has failed (and been logged). A 0000, E901
// or E902 answer goes out while its outcome's commit is on the way (see
// the package comment); a reader that wants the row as recorded (the demo,
// tests) waits here first.
func (s *Server) WaitRecorded() { s.recording.wait() }

// Close stops the server at once: it stops accepting, cancels core calls in
// flight (classified and recorded as failed calls) and closes every
// connection, then waits for the connection goroutines to end and for
// every outcome answered to be recorded.
func (s *Server) Close() error {
	s.beginStop()
	s.hardStop()
	s.wg.Wait()
	s.recording.wait()
	return nil
}

// hardStop closes every connection and cancels the core calls in flight,
// and returns how many whole frames were still being handled: the ones it
// cut short. They are counted after the connections are closed (no frame
// starts being handled after that) and before the calls are cancelled (a
// cancelled frame finishes quickly and would no longer count).
func (s *Server) hardStop() int64 {
	s.mu.Lock()
	for c := range s.conns {
		c.close()
	}
	s.mu.Unlock()
	cut := s.handling.Load()
	s.cancelBase(errHardStop)
	return cut
}
