// Command coresim serves the core banking simulator (SPEC §8) over HTTP:
//
//	coresim --port 9201 [--listen ADDR] [--delay SECONDS] [--max-concurrent N [--refuse-beyond]] [--service SECONDS] [--limit N] [--accounts FILE] [--log FILE]
//	        [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]] [--truth FILE] [--control HOST:PORT]
//
// With --tls-cert and --tls-key it serves https (and with --tls-client-ca
// requires a client certificate from those CAs), so that the relay's
// secured core link can be tried with the project's own tools.
//
// --truth and --control exist for cmd/verify: the first writes the core's
// ground truth (every transfer that arrived, every posting with its request
// and answer, every lookup answered; JSON lines, see coresim.TruthEvent), the
// second serves the fault controls (coresim.Server.ControlHandler: arm a
// misbehaviour for the next requests, refuse connections for a while, count
// the requests in flight) on a loopback listener of their own, apart from
// the core's API. Neither is on unless asked for.
//
// Once it listens it prints one line to standard output,
//
//	coresim listening on http://127.0.0.1:9201
//
// (https:// when serving TLS), so that a script can wait for it (and learn the port when --port is 0). Its
// own log goes to standard error. SIGINT or SIGTERM stops it gracefully: it
// stops accepting connections, lets requests in flight finish (a SLOW
// transfer still posts), and exits 0. A second signal kills it at once.
//
// Exit status: 0 after a clean stop, 2 for bad arguments or an unreadable
// accounts or log file (one line on standard error), 1 if it cannot listen or
// fails while serving.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"lhrelay/internal/app"
	"lhrelay/internal/cliflag"
	"lhrelay/internal/coresim"
	"lhrelay/internal/tlsconf"
)

func main() { app.Main(run) }

type options struct {
	addr     string // host:port to listen on
	delay    time.Duration
	limit    int64
	accounts string
	logPath  string
	maxConc  int
	refuse   bool
	service  time.Duration
	tls      tlsconf.ServerFiles
	truth    string // ground-truth log (JSON lines), for cmd/verify
	control  string // host:port of the fault controls, for cmd/verify
}

const usageText = `usage: coresim [--port P] [--listen ADDR] [--delay SECONDS] [--max-concurrent N [--refuse-beyond]] [--service SECONDS] [--limit N] [--accounts FILE] [--log FILE] [--truth FILE] [--control HOST:PORT]

Serves the core banking simulator (SPEC sections 3 and 8).

`

// parseArgs reads the command line. Its errors are one line, for stderr.
func parseArgs(args []string, usage io.Writer) (options, error) {
	fs := flag.NewFlagSet("coresim", flag.ContinueOnError)
	// flag would print the whole usage on every error; we print one line.
	fs.SetOutput(io.Discard)
	var (
		o      options
		port   = fs.Int("port", 9201, "TCP `port` to listen on; 0 picks a free one")
		listen = fs.String("listen", "127.0.0.1", "`address` to listen on: a host (with --port) or host:port")
	)
	cliflag.SecondsVar(fs, &o.delay, "delay", coresim.DefaultDelay, "`seconds` a transfer whose memo starts with SLOW waits before posting (e.g. 3, 0.5, 500ms); 0 = no wait")
	fs.IntVar(&o.maxConc, "max-concurrent", 0, "serve at most `N` requests at once and queue the rest, served in their turn (a core at its capacity); 0 = no bound")
	fs.BoolVar(&o.refuse, "refuse-beyond", false, "with --max-concurrent: answer 503 (Retry-After: 1, nothing posted) to a request that finds all N places taken, instead of queueing it (a core that sheds load)")
	cliflag.SecondsVar(fs, &o.service, "service", 0, "`seconds` every request takes while it is served (with --max-concurrent, the capacity is N / service a second); 0 = none")
	fs.Int64Var(&o.limit, "limit", coresim.DefaultLimit, "largest `amount` of one transfer; more is LIMIT_EXCEEDED")
	fs.StringVar(&o.accounts, "accounts", "", "CSV `file` of accounts (header bank,acct,balance) instead of the built-in set")
	fs.StringVar(&o.logPath, "log", "", "append one line per request to `file` (- for standard output)")
	fs.StringVar(&o.tls.Cert, "tls-cert", "", "PEM `file` of the certificate the relay sees: serve https (with --tls-key)")
	fs.StringVar(&o.tls.Key, "tls-key", "", "PEM `file` of the private key of --tls-cert")
	fs.StringVar(&o.tls.ClientCA, "tls-client-ca", "", "PEM `file` of the CAs a caller's client certificate must chain to: require one (mTLS)")
	fs.StringVar(&o.truth, "truth", "", "append the ground truth (every transfer arrived and posted, every lookup answered; JSON lines) to `file`")
	fs.StringVar(&o.control, "control", "", "serve the fault controls of cmd/verify on `host:port` (loopback only); off by default")

	if err := cliflag.Parse(fs, args, usage, usageText); err != nil {
		return o, err
	}
	portSet := false
	fs.Visit(func(f *flag.Flag) { portSet = portSet || f.Name == "port" })
	addr, err := cliflag.ListenAddr(*listen, *port, portSet)
	if err != nil {
		return o, err
	}
	o.addr = addr
	if o.control != "" {
		host, _, err := net.SplitHostPort(o.control)
		if err != nil {
			return o, fmt.Errorf("--control %q: %w", o.control, err)
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return o, fmt.Errorf("--control %q: want a loopback address: the controls make the core misbehave", o.control)
		}
	}
	if o.limit <= 0 {
		return o, fmt.Errorf("--limit %d: want a positive amount", o.limit)
	}
	if o.maxConc < 0 {
		return o, fmt.Errorf("--max-concurrent %d: want 0 (no bound) or more", o.maxConc)
	}
	if o.refuse && o.maxConc == 0 {
		return o, errors.New("--refuse-beyond needs --max-concurrent: without a bound nothing is beyond it")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args, stdout)
	if err != nil { // -h and --version too: Report says nothing and returns 0
		return app.Report(stderr, "coresim", app.Bad(err))
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	cfg := coresim.Config{Delay: o.delay, Limit: o.limit, MaxConcurrent: o.maxConc, RefuseBeyond: o.refuse, Service: o.service}
	if o.delay == 0 {
		cfg.Delay = -1 // in Config, zero means the default; here the user asked for none
	}
	if o.accounts != "" {
		cfg.Accounts, err = loadAccounts(o.accounts)
		if err != nil {
			return app.Report(stderr, "coresim", app.Bad(err))
		}
	}
	if o.logPath == "-" {
		cfg.Log = stdout
	} else if o.logPath != "" {
		f, err := os.OpenFile(o.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return app.Report(stderr, "coresim", app.Badf("--log: %w", err))
		}
		// Closed after Shutdown, when no handler can write any more; the
		// request log flushes after each burst, so nothing is left buffered.
		defer f.Close()
		cfg.Log = f
	}
	if o.truth != "" {
		f, err := os.OpenFile(o.truth, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			fmt.Fprintf(stderr, "coresim: --truth: %v\n", err)
			return 2
		}
		defer f.Close()
		cfg.Truth = f
	}
	sim := coresim.New(cfg)
	var tlsCfg *tls.Config
	if o.tls.Enabled() {
		ts, err := tlsconf.NewServer(o.tls)
		if err != nil {
			return app.Report(stderr, "coresim", app.Bad(err))
		}
		tlsCfg = ts.Config()
	}

	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return app.Report(stderr, "coresim", app.Badf("--listen/--port %s: %w", o.addr, err))
	}
	scheme := "http"
	if tlsCfg != nil {
		// HTTP/1.1 only, as the relay speaks it.
		ln, scheme = tls.NewListener(ln, tlsCfg), "https"
	}
	srv := &http.Server{
		Handler:           sim,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}

	nAccounts := len(cfg.Accounts)
	if cfg.Accounts == nil {
		nAccounts = len(coresim.DefaultAccounts())
	}
	logger.Info("coresim started",
		"addr", ln.Addr().String(),
		"delay", cliflag.FormatSeconds(o.delay)+"s",
		"max_concurrent", o.maxConc,
		"refuse_beyond", o.refuse,
		"service", cliflag.FormatSeconds(o.service)+"s",
		"limit", o.limit,
		"accounts", nAccounts,
		"accounts_file", o.accounts,
		"log", o.logPath,
		"tls", tlsCfg != nil,
		"tls_client_auth", o.tls.ClientCA != "",
	)

	serveErr := make(chan error, 1)
	gate := &gate{srv: srv, ln: ln, tls: tlsCfg, serveErr: serveErr}
	gate.serve(ln)
	if o.control != "" {
		cln, err := net.Listen("tcp", o.control)
		if err != nil {
			fmt.Fprintf(stderr, "coresim: --control: %v\n", err)
			return 1
		}
		csrv := &http.Server{Handler: sim.ControlHandler(gate.refuse), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = csrv.Serve(cln) }()
		defer csrv.Close()
		fmt.Fprintf(stdout, "coresim control on http://%s\n", cln.Addr())
	}
	fmt.Fprintf(stdout, "coresim listening on %s://%s\n", scheme, ln.Addr())

	select {
	case err := <-serveErr:
		logger.Error("serve failed", "err", err)
		return 1
	case <-ctx.Done():
	}

	// Requests in flight may include SLOW transfers: give them their delay
	// and some slack to post and answer before giving up on them.
	grace := max(o.delay, 0) + 10*time.Second
	logger.Info("stopping: finishing requests in flight", "grace", grace.String())
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Error("shutdown incomplete, closing connections", "err", err)
		_ = srv.Close()
		return 1
	}
	logger.Info("coresim stopped")
	return 0
}

func loadAccounts(path string) ([]coresim.Account, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--accounts: %w", err)
	}
	defer f.Close()
	accts, err := coresim.LoadAccounts(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err) // err says "accounts: line N: …"
	}
	return accts, nil
}

// gate lets the fault controls close the core's listener for a while, so
// that new connections are refused, and open it again on the same address.
type gate struct {
	srv      *http.Server
	tls      *tls.Config // nil: plain HTTP
	serveErr chan<- error
	mu       sync.Mutex
	ln       net.Listener
	closed   bool // refusing: Serve's error is expected
}

func (g *gate) serve(ln net.Listener) {
	go func() {
		err := g.srv.Serve(ln)
		g.mu.Lock()
		expected := g.closed || errors.Is(err, http.ErrServerClosed)
		g.mu.Unlock()
		if !expected {
			g.serveErr <- err
		}
	}()
}

// refuse closes the listener and the idle connections (kept-alive ones
// would otherwise still reach the core), and listens again after d.
func (g *gate) refuse(d time.Duration) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	addr := g.ln.Addr().String()
	_ = g.ln.Close()
	g.srv.SetKeepAlivesEnabled(false)
	time.AfterFunc(d, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.srv.SetKeepAlivesEnabled(true)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			g.serveErr <- fmt.Errorf("listening again after refusing: %w", err)
			return
		}
		if g.tls != nil {
			ln = tls.NewListener(ln, g.tls)
		}
		g.ln, g.closed = ln, false
		g.serve(ln)
	})
	return nil
}
