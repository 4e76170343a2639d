package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"lhrelay/internal/assemble"
	"lhrelay/internal/channel"
	"lhrelay/internal/corecall"
	"lhrelay/internal/coresim"
	"lhrelay/internal/ledger"
	"lhrelay/internal/metrics"
)

// The demo's timing: the relay gives up on the core after relayTimeout; a
// SLOW transfer is posted after slowDelay, so it answers E901 and is posted
// anyway.
const (
	relayTimeout = time.Second
	slowDelay    = 1500 * time.Millisecond
	// waitLimit bounds every wait of the demo, so that a broken build
	// fails instead of hanging CI.
	waitLimit = 10 * time.Second
)

// world is everything the demo runs in-process.
type world struct {
	sim      *coresim.Server
	arrivals *arrivals
	coreSrv  *http.Server
	core     *corecall.Client // the batch commands' client of the real core
	led      *ledger.Ledger
	dbPath   string
	tmpDir   string // removed at stop, unless empty
	m        *metrics.Metrics

	relay, down         *assemble.Relay // down's core is a closed port
	relayAddr, downAddr string
	conn                *channel.Conn // a persistent channel connection to relay

	steps []step
}

// asBatch runs fn on the ledger opened as the batch command name would
// open it, so that the history names it as the actor of its changes.
func (w *world) asBatch(name string, fn func(l *ledger.Ledger) error) error {
	l, err := ledger.OpenExisting(w.dbPath, ledger.WithActor(ledger.NewActor(name)))
	if err != nil {
		return err
	}
	return errors.Join(fn(l), l.Close())
}

// start brings up the core, the ledger and both relays on free ports.
func start(ctx context.Context, o options) (w *world, err error) {
	w = &world{}
	defer func() {
		if err != nil {
			err = errors.Join(err, w.stop())
		}
	}()
	log := slog.New(slog.DiscardHandler)
	if o.verbose && o.log != nil {
		log = slog.New(slog.NewTextHandler(o.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}

	w.dbPath = o.keepDB
	if w.dbPath == "" {
		if w.tmpDir, err = os.MkdirTemp("", "lhrelay-demo-"); err != nil {
			return w, err
		}
		w.dbPath = filepath.Join(w.tmpDir, "relay.db")
	}

	// The core simulator, behind a wrapper that announces each transfer
	// as it arrives.
	w.sim = coresim.New(coresim.Config{Delay: slowDelay})
	w.arrivals = newArrivals(w.sim)
	coreLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return w, fmt.Errorf("core: %w", err)
	}
	w.coreSrv = &http.Server{Handler: w.arrivals, ReadHeaderTimeout: waitLimit}
	go w.coreSrv.Serve(coreLn)
	coreURL := "http://" + coreLn.Addr().String()

	if w.led, err = ledger.Open(w.dbPath, ledger.WithActor(ledger.NewActor("relay"))); err != nil {
		return w, err
	}
	w.m = metrics.New()
	w.m.WatchLedger(w.led)
	if w.core, err = corecall.New(corecall.Config{BaseURL: coreURL, Timeout: relayTimeout}); err != nil {
		return w, err
	}
	if w.relay, w.relayAddr, err = w.startRelay(ctx, coreURL, log.With("relay", "main")); err != nil {
		return w, err
	}

	// The second relay shares the ledger; its core is an address where
	// nothing listens, so every call fails to connect: nothing is sent.
	closed, err := closedAddr()
	if err != nil {
		return w, err
	}
	if w.down, w.downAddr, err = w.startRelay(ctx, "http://"+closed, log.With("relay", "core-down")); err != nil {
		return w, err
	}
	if w.conn, err = channel.Dial(ctx, w.relayAddr, waitLimit); err != nil {
		return w, err
	}
	return w, nil
}

// waitRecorded waits until both relays have recorded every outcome they
// answered: a 0000, E901 or E902 reaches the channel while its row's
// commit is on the way.
func (w *world) waitRecorded() {
	for _, r := range []*assemble.Relay{w.relay, w.down} {
		if r != nil {
			r.Server().WaitRecorded()
		}
	}
}

// startRelay starts a relay on a free port in front of the core at
// coreURL, on the demo's shared ledger and metrics.
func (w *world) startRelay(ctx context.Context, coreURL string, log *slog.Logger) (*assemble.Relay, string, error) {
	r, err := assemble.Start(ctx, assemble.Config{
		Listen: "127.0.0.1:0",
		Core:   coreURL, Timeout: relayTimeout,
		Ledger: w.led, Metrics: w.m,
		Log: log,
	})
	if err != nil {
		return nil, "", err
	}
	return r, r.Addr().String(), nil
}

// closedAddr returns a local address where nothing listens.
func closedAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// stop stops what start started, relays first (a clean stop leaves no row
// SENT), then the core, then the ledger.
func (w *world) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	var errs []error
	if w.conn != nil {
		w.conn.Close()
	}
	for _, r := range []*assemble.Relay{w.relay, w.down} {
		if r != nil {
			errs = append(errs, r.Stop(ctx))
		}
	}
	if w.coreSrv != nil {
		errs = append(errs, w.coreSrv.Shutdown(ctx))
	}
	if w.led != nil {
		errs = append(errs, w.led.Close())
	}
	if w.tmpDir != "" {
		errs = append(errs, os.RemoveAll(w.tmpDir))
	}
	return errors.Join(errs...)
}

// arrivals wraps the core: it counts the POST /v1/transfers that reach it
// per GUID and announces each arrival, so that the demo knows a transfer is
// in flight at the core (its ledger row claimed) without sleeping.
type arrivals struct {
	next  http.Handler
	mu    sync.Mutex
	posts map[string]int
	waits map[string]chan struct{}
}

func newArrivals(next http.Handler) *arrivals {
	return &arrivals{next: next, posts: map[string]int{}, waits: map[string]chan struct{}{}}
}

func (a *arrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		guid := r.Header.Get("X-GUID")
		a.mu.Lock()
		a.posts[guid]++
		if ch, ok := a.waits[guid]; ok {
			close(ch)
			delete(a.waits, guid)
		}
		a.mu.Unlock()
	}
	a.next.ServeHTTP(w, r)
}

// expect returns a channel closed when the next POST for guid arrives.
func (a *arrivals) expect(guid string) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	ch := make(chan struct{})
	a.waits[guid] = ch
	return ch
}

// count is how many POSTs for guid have reached the core.
func (a *arrivals) count(guid string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.posts[guid]
}

// send sends frame on c and decodes the answer.
func send(c *channel.Conn, frame []byte) ([]byte, channel.Answer, error) {
	raw, err := c.Send(frame)
	if err != nil {
		return nil, channel.Answer{}, err
	}
	a, err := channel.Decode(raw)
	return raw, a, err
}

// sendOnce sends frame on a new connection to addr.
func sendOnce(ctx context.Context, addr string, frame []byte) ([]byte, channel.Answer, error) {
	c, err := channel.Dial(ctx, addr, waitLimit)
	if err != nil {
		return nil, channel.Answer{}, err
	}
	defer c.Close()
	return send(c, frame)
}
