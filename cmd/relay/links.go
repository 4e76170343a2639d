package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"lhrelay/internal/admit"
	"lhrelay/internal/breaker"
	"lhrelay/internal/cliflag"
	"lhrelay/internal/generated"
	"lhrelay/internal/relay"
	"lhrelay/internal/tlsconf"
)

// Defaults of the breaker flags (README, "The breaker"): five connections
// refused in a row are not bad luck on a healthy core, and ten seconds is
// long enough to stop a flood of --timeout waits and short enough that a
// core back up is found soon. The failure-rate rule's defaults are the
// breaker package's.
const (
	defaultBreakerFailures = 5
	defaultBreakerCooldown = 10 * time.Second
)

// defaultMaxInflight is admission's default ceiling (README, "Overload");
// the limit starts at admit.InitialFor(--timeout).
const defaultMaxInflight = admit.DefaultMax

// linkOptions are the flags that secure and guard the links: TLS on both
// sides, the allow-list and the breaker.
type linkOptions struct {
	core            tlsconf.CoreFiles
	channel         tlsconf.ServerFiles
	allowList       string
	allow           []netip.Prefix
	clientOrg       string
	clientOrgs      *relay.ClientOrgs
	breakerFailures int
	breakerCooldown time.Duration
	breakerWindow   time.Duration
	breakerMinCalls int
	breakerRate     float64
	maxInflight     int
	fixedInflight   bool
	admitWait       time.Duration
}

func (lo *linkOptions) addFlags(fs *flag.FlagSet) {
	lo.core.AddFlags(fs)
	lo.channel.AddFlags(fs)
	fs.StringVar(&lo.allowList, "allow", "any", "accept channels only from these networks, `CIDR[,CIDR…]`, or from any address (any); others are closed unread")
	fs.StringVar(&lo.clientOrg, "tls-client-org", "", "bind client certificates to the SRC_ORG values they may send: `FIELD=VALUE:ORG[,ORG…]` rules separated by ';' (FIELD O, OU, CN or DNS), or @FILE with one rule a line; another SRC_ORG is answered "+string(generated.RspBadFrame)+" (needs --tls-client-ca; default off)")
	fs.IntVar(&lo.breakerFailures, "breaker-failures", defaultBreakerFailures, "core calls in a row that got no answer (could not connect, timed out or lost the connection) before the relay stops calling the core for --breaker-cooldown, answering "+string(generated.RspConnectFail)+" at once (0: no breaker)")
	cliflag.SecondsVar(fs, &lo.breakerCooldown, "breaker-cooldown", defaultBreakerCooldown, "`seconds` the core is not called once the breaker opened; then one probe call at a time decides")
	cliflag.SecondsVar(fs, &lo.breakerWindow, "breaker-window", breaker.DefaultWindow, "`seconds` over which the breaker's failure rate is counted")
	fs.IntVar(&lo.breakerMinCalls, "breaker-min-calls", breaker.DefaultMinCalls, "calls the --breaker-window must hold before its failure rate can open the breaker")
	fs.Float64Var(&lo.breakerRate, "breaker-rate", breaker.DefaultRate, "`share` (0 to 1] of the calls in --breaker-window that got no answer, with none answered meanwhile, which opens the breaker")
	fs.IntVar(&lo.maxInflight, "max-inflight", defaultMaxInflight, "most core calls in flight at once; the limit adapts below it to the core's latency, and a frame not admitted within --admit-wait is answered "+string(generated.RspConnectFail)+", nothing sent (0: no admission)")
	fs.BoolVar(&lo.fixedInflight, "fixed-inflight", false, "keep the limit at --max-inflight instead of adapting it to the core's latency")
	cliflag.PositiveSecondsVar(fs, &lo.admitWait, "admit-wait", admit.DefaultMaxWait, "`seconds` a frame may wait for a core call slot before it is answered "+string(generated.RspConnectFail))
}

// check validates the flags; coreURL is --core.
func (lo *linkOptions) check(coreURL string) error {
	if v, ok := os.LookupEnv(cliflag.EnvVar("allow")); ok && strings.TrimSpace(v) == "" {
		// An empty variable counts as unset everywhere else; here that
		// would mean every address, so it is refused instead.
		return fmt.Errorf("%s is set but empty: list networks (CIDR[,CIDR…]) or write any to accept every address", cliflag.EnvVar("allow"))
	}
	switch strings.TrimSpace(lo.allowList) {
	case "any":
	case "":
		// An empty list is ambiguous (every address, or none) and easy
		// to set by mistake: the operator writes which.
		return errors.New("--allow is empty: list networks (CIDR[,CIDR…]) or write any to accept every address")
	default:
		allow, err := relay.ParseAllow(lo.allowList)
		if err != nil {
			return fmt.Errorf("--allow %w", err)
		}
		lo.allow = allow
	}
	if lo.clientOrg != "" {
		if lo.channel.ClientCA == "" {
			return errors.New("--tls-client-org needs --tls-client-ca: only a verified client certificate can be bound to SRC_ORGs")
		}
		orgs, err := relay.ParseClientOrgs(lo.clientOrg)
		if err != nil {
			return fmt.Errorf("--tls-client-org %w", err)
		}
		lo.clientOrgs = orgs
	}
	if lo.breakerFailures < 0 {
		return fmt.Errorf("--breaker-failures %d: want 0 (off) or more", lo.breakerFailures)
	}
	if lo.breakerFailures > 0 && lo.breakerCooldown <= 0 {
		return fmt.Errorf("--breaker-cooldown must be more than 0 (or --breaker-failures 0)")
	}
	if lo.breakerWindow <= 0 {
		return fmt.Errorf("--breaker-window must be more than 0")
	}
	if lo.breakerMinCalls < 1 {
		return fmt.Errorf("--breaker-min-calls %d: want at least 1", lo.breakerMinCalls)
	}
	if !(lo.breakerRate > 0 && lo.breakerRate <= 1) {
		return fmt.Errorf("--breaker-rate %v: want more than 0 and at most 1", lo.breakerRate)
	}
	if lo.maxInflight < 0 {
		return fmt.Errorf("--max-inflight %d: want 0 (off) or more", lo.maxInflight)
	}
	if _, err := lo.core.Config(coreURL); err != nil {
		return err
	}
	return nil
}

// links is what the flags built: the core's TLS configuration, the channel
// side's (re-readable) and the breaker.
type links struct {
	coreTLS    *tls.Config
	coreCerts  []tlsconf.Cert
	channelTLS *tlsconf.Server // nil: plain TCP
	breaker    *breaker.Breaker
	limiter    *admit.Limiter // nil: no admission
}

// certs lists every certificate loaded, both sides, as now in force.
func (l *links) certs() []tlsconf.Cert {
	out := append([]tlsconf.Cert(nil), l.coreCerts...)
	if l.channelTLS != nil {
		out = append(out, l.channelTLS.Certs()...)
	}
	return out
}

// logExpiry logs each certificate that has expired (error) or expires
// within tlsconf.ExpiryWarning (warn): at start and after each reload, so
// that a certificate is not found expired by the first channel refused.
func logExpiry(log *slog.Logger, certs []tlsconf.Cert, now time.Time) {
	for _, c := range certs {
		attrs := []any{"flag", "--" + c.Flag, "file", c.File, "subject", c.Subject, "not_after", c.NotAfter.UTC().Format(time.RFC3339)}
		switch expired, soon := c.Soon(now); {
		case expired:
			log.Error("certificate expired: handshakes that depend on it fail", attrs...)
		case soon:
			log.Warn("certificate expires soon: replace it and send SIGHUP (channel side) or restart (core side)", append(attrs, "days_left", int(c.NotAfter.Sub(now).Hours()/24))...)
		}
	}
}

// build makes what the flags describe; timeout is --timeout, the bound
// admission keeps calls within.
func (lo *linkOptions) build(coreURL string, timeout time.Duration, log *slog.Logger) (*links, error) {
	var l links
	var err error
	if l.coreTLS, err = lo.core.Config(coreURL); err != nil {
		return nil, err
	}
	if l.coreCerts, err = lo.core.Certs(); err != nil {
		return nil, err
	}
	if lo.channel.Enabled() {
		if l.channelTLS, err = tlsconf.NewServer(lo.channel); err != nil {
			return nil, err
		}
	}
	l.limiter, err = admit.New(admit.Settings{
		Max: lo.maxInflight, Initial: min(admit.InitialFor(timeout), lo.maxInflight), Fixed: lo.fixedInflight,
		Timeout: timeout, MaxWait: lo.admitWait,
	})
	if err != nil {
		return nil, err
	}
	l.breaker, err = breaker.New(breaker.Settings{
		Name: coreURL, Failures: lo.breakerFailures, Cooldown: lo.breakerCooldown,
		Window: lo.breakerWindow, MinCalls: lo.breakerMinCalls, Rate: lo.breakerRate,
		OnChange: func(core string, from, to breaker.State) {
			switch to {
			case breaker.Open:
				log.Error("core breaker open: not calling the core; frames are answered "+string(generated.RspConnectFail)+" at once",
					"core", core, "from", from.String(), "why", l.breaker.Why(), "cooldown", cliflag.FormatSeconds(lo.breakerCooldown)+"s")
			case breaker.HalfOpen:
				log.Warn("core breaker half-open: the next call is a probe", "core", core)
			default:
				log.Info("core breaker closed: the core answers again", "core", core)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return &l, nil
}

// serverConfig is the channel side's TLS configuration, nil for plain TCP.
func (l *links) serverConfig() *tls.Config {
	if l.channelTLS == nil {
		return nil
	}
	return l.channelTLS.Config()
}

// notifyHUP starts catching SIGHUP. The relay calls it first thing: a
// SIGHUP that comes before (a reload while the database is slow to answer
// at start) would otherwise kill it with no log line, which systemd takes
// for a clean exit. One that comes during start-up is acted on once the
// relay serves (reloadOnHUP). stop undoes it.
func notifyHUP() (hup chan os.Signal, stop func()) {
	hup = make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup, func() { signal.Stop(hup) }
}

// reloadOnHUP re-reads the channel side's certificate files on each SIGHUP
// from hup until ctx ends. Connections already open keep their session;
// the next handshake uses the new files. A bad file keeps the ones in
// force.
func (l *links) reloadOnHUP(ctx context.Context, hup <-chan os.Signal, files tlsconf.ServerFiles, log *slog.Logger) {
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
			}
			if l.channelTLS == nil {
				log.Info("SIGHUP: no --tls-cert to re-read")
				continue
			}
			if err := l.channelTLS.Reload(); err != nil {
				log.Error("SIGHUP: TLS files not reloaded; keeping the certificate in force", "err", err)
				continue
			}
			log.Info("SIGHUP: TLS files reloaded; new connections use them", "tls_cert", files.Cert, "tls_client_ca", files.ClientCA)
			logExpiry(log, l.channelTLS.Certs(), time.Now())
		}
	}()
}
