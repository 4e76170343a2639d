// Command relay serves LH-STD channels (SPEC §1, §5): every valid request
// frame becomes exactly one JSON call to the core, recorded in the ledger
// (SPEC §6), and is answered with one standard response code.
//
//	relay [--port P] [--listen ADDR] [--core URL] [--timeout SECONDS] [--db PATH|URL] [options]
//
// --db is a SQLite file (default relay.db, created if missing) or a
// postgres:// (postgresql://) URL: several relays on several hosts then
// share one ledger (SPEC §6a), e.g.
// postgres://lhrelay@db1:5432,db2:5432/ledger?target_session_attrs=read-write.
// A libpq key=value string is refused (exit 2). A primary that streams to
// standbys while synchronous_standby_names is empty is refused (exit 2)
// unless --allow-async-replication; the check is repeated every 10 s and
// shown on /readyz and in the metrics.
//
// --listen is a host (combined with --port) or a host:port (then --port must
// not be given): --listen 0.0.0.0 --port 9200 and --listen 0.0.0.0:9200 are
// the same. The default, 127.0.0.1:9200, accepts local channels only.
//
// Durations are seconds with decimals (0.5) or Go durations (500ms).
// --connect-timeout may not be longer than --timeout, which bounds the whole
// core call from the moment it starts, connecting included (its default is
// capped at a shorter --timeout).
//
// Once it listens it prints one line to standard output,
//
//	relay listening on 127.0.0.1:9200
//
// so that a script can wait for it (and learn the port when --port is 0),
// and with --metrics-addr a second one, "metrics listening on
// http://127.0.0.1:9300". Its log goes to standard error (--log-format text
// or json, --log-level): a line with every setting in force at start, one
// line per frame (account numbers masked above debug level; see
// internal/relay, Logs), and a line when it has stopped.
//
// --metrics-addr ADDR (off by default) serves, on its own HTTP listener,
// /metrics (Prometheus: frames by TX_CODE and response code, core call
// latency, frames in flight, connections, ledger rows by state,
// certificates' expiry), /healthz and /livez (200 while the process runs)
// and /readyz (200 when the ledger answers, --max-conns refuses nothing and
// the relay is not stopping, else 503). Bind it to an address only the
// monitoring network reaches.
//
// A new connection has the shorter of --frame-timeout and --idle-timeout
// to finish its TLS handshake and start its first frame; one address holds at most --max-conns-per-addr
// connections (default half of --max-conns), so that silent or hostile
// connections cannot take every slot (SPEC 5.7).
//
// The links can be secured and guarded (README, "Securing the links"):
// --core https://… with --core-ca, --core-cert and --core-key (mTLS);
// --tls-cert and --tls-key serve channels over TLS, --tls-client-ca
// requires a client certificate, --tls-client-org binds each client
// certificate to the SRC_ORGs it may send; --allow CIDR[,CIDR…] (or any)
// accepts channels only from those networks; --breaker-failures and
// --breaker-cooldown stop calling a core that keeps failing to connect or
// timing out (frames are answered E902 at once meanwhile). SIGHUP
// re-reads the --tls-* files: new connections use them, open ones are not
// dropped, and a bad file keeps the ones in force (logged). SIGHUP is
// caught from the start, so one sent while the relay is starting does not
// kill it. Certificates that expired, or expire within 14 days, are logged
// at start and on each reload.
//
// SIGINT or SIGTERM stops it: it stops accepting, closes idle connections,
// finishes the frames in flight (each bounded by --timeout; the whole stop by
// --timeout plus 5 seconds, after which remaining core calls are cancelled
// and recorded as E901/E902, never left SENT), closes the ledger and exits 0.
// A frame still arriving may arrive whole within --timeout of the signal and
// is served; one that does not was never processed: it is dropped then
// (logged with the bytes received; the channel resends it with the same
// GUID) and the stop is still clean.
// A second signal kills it at once.
//
// Exit status: 0 after a clean stop; 2 for a bad setting or a resource one
// names that cannot be used at start (a port in use, a ledger it cannot
// open, a replication it refuses): one line on standard error naming the
// flag, variable or file; 1 if serving failed or the stop was cut short.
//
// Unless GOGC is set, the relay runs with a garbage collection target of
// 400 rather than Go's 100 (gcPercent says why).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"lhrelay/internal/app"
	"lhrelay/internal/assemble"
	"lhrelay/internal/cliflag"
	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/metrics"
	"lhrelay/internal/relay"
)

func main() {
	defaultGC(os.Getenv)
	app.Main(run)
}

// gcPercent is the relay's garbage collection target (GOGC) when the
// environment sets none. The relay keeps little alive (a few MB) while a
// transfer on PostgreSQL allocates about 7 KB (pgconn builds each batch's
// messages in a buffer of its own), so at Go's default of 100 the
// collector runs many times a second: a tenth of the relay's CPU at 64
// channels on PostgreSQL. At 400 the relay's CPU per transfer there is
// about 10% lower, for about 13 MB more resident memory (23 → 36 MB).
const gcPercent = 400

// defaultGC sets gcPercent unless GOGC is set: an operator's GOGC wins.
func defaultGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}

// stopMargin is added to --timeout to bound a graceful stop: time to record
// the outcomes and write the answers after the last core call returns.
const stopMargin = 5 * time.Second

type options struct {
	addr           string
	listenFlags    string // the flags addr came from, for errors
	core           string
	timeout        time.Duration
	connectTimeout time.Duration
	frameTimeout   time.Duration
	idleTimeout    time.Duration
	maxConns       int
	maxPerAddr     int
	db             string
	metricsAddr    string
	logFormat      string
	logLevel       slog.Level
	links          linkOptions
	settle         settleOptions
	allowAsync     bool
}

const usageText = `usage: relay [--port P] [--listen ADDR] [--core URL] [--timeout SECONDS] [--db PATH] [options]

Serves LH-STD channels: each request frame becomes one call to the core,
recorded in the ledger, answered with one response code (SPEC section 5).
Durations are seconds (1, 0.5) or Go durations (500ms).

`

func parseArgs(args []string, usage io.Writer) (options, error) {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // one-line errors, not the whole usage
	var (
		o        options
		port     = fs.Int("port", 9200, "TCP `port` to listen on for channels; 0 picks a free one")
		listen   = fs.String("listen", "127.0.0.1", "`address` to listen on: a host (with --port) or host:port")
		logLevel = fs.String("log-level", "info", "log `level`: debug, info, warn or error")
	)
	fs.StringVar(&o.core, "core", "http://127.0.0.1:9201", "base `URL` of the core banking system")
	cliflag.PositiveSecondsVar(fs, &o.timeout, "timeout", corecall.DefaultTimeout, "`seconds` a core call may take in all, connecting included; past it the answer is "+string(generated.RspReadTimeout)+" (or "+string(generated.RspConnectFail)+" if nothing was sent)")
	cliflag.PositiveSecondsVar(fs, &o.connectTimeout, "connect-timeout", corecall.DefaultConnectTimeout, "`seconds` to establish the connection to the core, TLS handshake included ("+string(generated.RspConnectFail)+" past it); at most --timeout")
	cliflag.PositiveSecondsVar(fs, &o.frameTimeout, "frame-timeout", relay.DefaultFrameTimeout, "`seconds` a started frame has to arrive whole (else the connection is dropped); also bounds writing an answer")
	cliflag.PositiveSecondsVar(fs, &o.idleTimeout, "idle-timeout", relay.DefaultIdleTimeout, "`seconds` a connection may wait between frames before it is closed")
	fs.IntVar(&o.maxConns, "max-conns", relay.DefaultMaxConns, "most channel connections open at once; one more is closed at once, unread")
	fs.IntVar(&o.maxPerAddr, "max-conns-per-addr", 0, "most channel connections open at once from one address (0: half of --max-conns, room for a gateway's many channels while one address cannot lock out the rest); one more is closed at once, unread")
	fs.StringVar(&o.db, "db", "relay.db", "the ledger: a SQLite `file`, created if missing, or a postgres:// URL of a ledger shared by several relays")
	fs.BoolVar(&o.allowAsync, "allow-async-replication", false, "start on a PostgreSQL primary whose standbys replicate asynchronously (synchronous_standby_names empty), accepting that a failover may forget acknowledged claims and post their retries twice; /readyz and the metrics still say so")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "`host:port` serving /metrics, /healthz (/livez) and /readyz over HTTP (default off), e.g. 127.0.0.1:9300")
	fs.StringVar(&o.logFormat, "log-format", "text", "log `format`: text or json")
	o.links.addFlags(fs)
	o.settle.addFlags(fs)

	if err := cliflag.Parse(fs, args, usage, usageText); err != nil {
		return o, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	addr, err := cliflag.ListenAddr(*listen, *port, set["port"])
	if err != nil {
		return o, err
	}
	o.addr = addr
	o.listenFlags = "--listen " + *listen
	if set["port"] || !strings.Contains(*listen, ":") {
		o.listenFlags += " --port " + strconv.Itoa(*port)
	}
	if o.maxConns < 1 {
		return o, fmt.Errorf("--max-conns %d: want at least 1", o.maxConns)
	}
	if o.maxPerAddr < 0 {
		return o, fmt.Errorf("--max-conns-per-addr %d: want 0 (half of --max-conns) or more", o.maxPerAddr)
	}
	if err := ledger.CheckName(o.db); err != nil {
		return o, fmt.Errorf("--db: %w", err)
	}
	if o.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(o.metricsAddr); err != nil {
			return o, fmt.Errorf("--metrics-addr %q: want host:port", o.metricsAddr)
		}
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return o, fmt.Errorf("--log-format %q: want text or json", o.logFormat)
	}
	if err := o.logLevel.UnmarshalText([]byte(*logLevel)); err != nil {
		return o, fmt.Errorf("--log-level %q: want debug, info, warn or error", *logLevel)
	}
	// Checked here, so a bad URL is an argument error (exit 2).
	if _, err := corecall.New(corecall.Config{BaseURL: o.core}); err != nil {
		return o, fmt.Errorf("--core: %w", err)
	}
	if err := o.links.check(o.core); err != nil {
		return o, err
	}
	if set["connect-timeout"] && o.connectTimeout > o.timeout {
		// --timeout bounds the whole call, connecting included: a longer
		// connect timeout would never be reached, and saying nothing would
		// let an operator believe it is in force.
		return o, fmt.Errorf("--connect-timeout %ss: longer than --timeout %ss, which bounds the whole core call, connecting included", cliflag.FormatSeconds(o.connectTimeout), cliflag.FormatSeconds(o.timeout))
	}
	if err := o.settle.check(o.timeout); err != nil {
		return o, err
	}
	return o, nil
}

func newLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	hup, stopHUP := notifyHUP() // before anything slow
	defer stopHUP()
	o, err := parseArgs(args, stdout)
	if err != nil { // -h and --version too: Report says nothing and returns 0
		return app.Report(stderr, "relay", app.Bad(err))
	}
	log := newLogger(stderr, o.logFormat, o.logLevel)
	lk, err := o.links.build(o.core, o.timeout, log)
	if err != nil {
		return app.Report(stderr, "relay", app.Bad(err))
	}
	logExpiry(log, lk.certs(), time.Now())

	var m *metrics.Metrics
	if o.metricsAddr != "" {
		m = metrics.New()
	}
	r, err := assemble.Start(ctx, assemble.Config{
		Listen: o.addr, ListenFlag: o.listenFlags,
		Core: o.core, CoreTLS: lk.coreTLS, Timeout: o.timeout, ConnectTimeout: o.connectTimeout,
		// The instance chosen here names this relay's history chain.
		DB: o.db, LedgerOptions: []ledger.Option{ledger.WithActor(ledger.NewActor("relay"))}, AllowAsync: o.allowAsync,
		FrameTimeout: o.frameTimeout, IdleTimeout: o.idleTimeout,
		MaxConns: o.maxConns, MaxConnsPerAddr: o.maxPerAddr,
		// A frame still arriving at a stop is dropped at the stop's
		// bound, --timeout; the margin is for recording and answering.
		StopArrival: o.timeout,
		ChannelTLS:  lk.serverConfig(), Allow: o.links.allow, ClientOrgs: o.links.clientOrgs,
		Breaker: lk.breaker, Limiter: lk.limiter, Certs: lk.certs,
		Metrics: m, MetricsAddr: o.metricsAddr,
		Settle: o.settle.config(),
		Log:    log,
	})
	if err != nil {
		return app.Report(stderr, "relay", err)
	}
	led, srv, ln := r.Ledger(), r.Server(), r.Addr()
	metricsAddr := "off"
	if a := r.MetricsAddr(); a != nil {
		metricsAddr = a.String()
	}
	port := 0
	if a, ok := ln.(*net.TCPAddr); ok {
		port = a.Port
	}
	log.Info("relay started",
		"addr", ln.String(),
		"port", port,
		"core", o.core,
		"db", led.Path(),
		"ledger", led.Store(),
		"ledger_link", string(led.Link()),
		"history_chain", led.ChainHead().Chain,
		"timeout", cliflag.FormatSeconds(o.timeout)+"s",
		"connect_timeout", cliflag.FormatSeconds(min(o.connectTimeout, o.timeout))+"s",
		"frame_timeout", cliflag.FormatSeconds(o.frameTimeout)+"s",
		"idle_timeout", cliflag.FormatSeconds(o.idleTimeout)+"s",
		"max_conns", o.maxConns,
		"max_conns_per_addr", srv.MaxConnsPerAddr(),
		"metrics_addr", metricsAddr,
		"log_format", o.logFormat,
		"log_level", o.logLevel.String(),
		"tls", lk.channelTLS != nil,
		"tls_client_auth", lk.channelTLS != nil && lk.channelTLS.ClientAuth(),
		"allow", o.links.allowList,
		"tls_client_org", o.links.clientOrg != "",
		"breaker_failures", o.links.breakerFailures,
		"breaker_cooldown", cliflag.FormatSeconds(o.links.breakerCooldown)+"s",
		"breaker_window", cliflag.FormatSeconds(o.links.breakerWindow)+"s",
		"breaker_min_calls", o.links.breakerMinCalls,
		"breaker_rate", o.links.breakerRate,
		"max_inflight", o.links.maxInflight,
		"fixed_inflight", o.links.fixedInflight,
		"admit_wait", cliflag.FormatSeconds(o.links.admitWait)+"s",
		"settle_every", cliflag.FormatSeconds(o.settle.every)+"s",
		"settle_min_age", cliflag.FormatSeconds(o.settle.minAge)+"s",
		"stale_sent", cliflag.FormatSeconds(o.settle.staleSent)+"s",
		"trust_lookup_404", o.settle.trustLookup404,
	)
	lk.reloadOnHUP(ctx, hup, o.links.channel, log)
	fmt.Fprintf(stdout, "relay listening on %s\n", ln)
	if m != nil {
		fmt.Fprintf(stdout, "metrics listening on http://%s\n", metricsAddr)
	}
	stopHeads := logChainHeads(led, log, chainHeadEvery)
	// After the ledger closed: the last head.
	defer stopHeads()
	return serve(ctx, r, o.timeout+stopMargin, log)
}

// chainHeadEvery is how often the relay logs its history chain's head when
// it moved: often enough that a rewritten chain is caught against the log
// within minutes, rarely enough to be one line among thousands.
const chainHeadEvery = time.Minute

// logChainHeads logs led's history chain head every interval when it
// moved, and once more when stopped (after the ledger closed: the last
// head). The log, kept apart from the database, anchors the chain: ledger
// audit against these lines detects a chain rewritten with its head.
func logChainHeads(led *ledger.Ledger, log *slog.Logger, every time.Duration) (stop func()) {
	logHead := func(msg string) ledger.ChainHead {
		h := led.ChainHead()
		log.Info(msg, "chain", h.Chain, "seq", h.Seq, "hash", h.Hash)
		return h
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		last := led.ChainHead()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if led.ChainHead() != last {
					last = logHead("history chain head")
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		logHead("history chain head at stop")
	}
}

// serve lets r serve until ctx ends, then stops it within grace (the
// server logs its stop).
func serve(ctx context.Context, r *assemble.Relay, grace time.Duration, log *slog.Logger) int {
	select {
	case err := <-r.Failed():
		log.Error("serving failed", "err", err)
		r.Close()
		return 1
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := r.Stop(sctx); err != nil {
		return 1
	}
	return 0
}
