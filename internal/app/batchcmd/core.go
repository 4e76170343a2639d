package batchcmd

import (
	"log/slog"
	"time"

	"lhrelay/internal/admit"
	"lhrelay/internal/app"
	"lhrelay/internal/batch"
	"lhrelay/internal/cliflag"
	"lhrelay/internal/corecall"
	"lhrelay/internal/ledger"
	"lhrelay/internal/tlsconf"
)

// CoreFlags are the core flags of resolve and reprocess: how to reach it,
// and whether its lookups' 404s are checked.
type CoreFlags struct {
	URL     string
	Timeout time.Duration
	TLS     tlsconf.CoreFiles // --core-ca, --core-cert, --core-key, as the relay takes them
	// TrustLookup404 is --trust-lookup-404 (batch.LookupGuard's
	// TrustNotFound), as the relay takes it.
	TrustLookup404 bool
	// MaxInFlight (--max-inflight) and Rate (--rate): batch.Pace.
	MaxInFlight int
	Rate        float64
}

// admitWait is how long one of a run's core calls waits for a slot before
// it asks again (batch.Pace: a row that is not admitted waits, it is
// never answered or recorded for it).
const admitWait = 100 * time.Millisecond

// AddCoreFlags registers --core, --timeout, the core's TLS files and
// --trust-lookup-404 on c.
func (c *Command) AddCoreFlags() *CoreFlags {
	cf := &CoreFlags{}
	c.Flags.StringVar(&cf.URL, "core", "", "base `URL` of the core, e.g. http://127.0.0.1:9201 (required)")
	cliflag.PositiveSecondsVar(c.Flags, &cf.Timeout, "timeout", 5*time.Second, "bound on each core call, in `seconds`")
	cf.TLS.AddFlags(c.Flags)
	c.Flags.BoolVar(&cf.TrustLookup404, batch.TrustNotFoundFlag, false, batch.TrustNotFoundUsage)
	c.Flags.IntVar(&cf.MaxInFlight, "max-inflight", batch.DefaultMaxInFlight, "most rows handled at once; their core calls are admitted as the relay admits its own, below this bound and adapting to the core's latency")
	c.Flags.Float64Var(&cf.Rate, "rate", 0, "most rows started a second (0: as fast as admission lets)")
	return cf
}

// Pace is how fast the run goes, as the flags say, with an admission of
// its own for its core calls (SPEC 5.12).
func (cf *CoreFlags) Pace() (batch.Pace, error) {
	lim, err := admit.New(admit.Settings{Max: cf.MaxInFlight, Timeout: cf.Timeout, MaxWait: admitWait})
	if err != nil {
		return batch.Pace{}, app.Badf("--max-inflight: %w", err)
	}
	return batch.Pace{MaxInFlight: cf.MaxInFlight, Rate: cf.Rate, Limiter: lim}, nil
}

// Guard is the lookup guard these flags describe, for one run.
func (cf *CoreFlags) Guard() *batch.LookupGuard {
	if cf.TrustLookup404 {
		slog.Warn("--" + batch.TrustNotFoundFlag + ": every lookup answering 404 settles its row as never posted, unchecked; a wrong --core would make posted transfers resendable")
	}
	return &batch.LookupGuard{TrustNotFound: cf.TrustLookup404}
}

// Client checks the flags and makes the core client, with a connection
// for each row the run may have in flight.
func (cf *CoreFlags) Client() (*corecall.Client, error) {
	if cf.URL == "" {
		return nil, app.Badf("--core is required")
	}
	if cf.MaxInFlight < 1 {
		return nil, app.Badf("--max-inflight %d: want at least 1", cf.MaxInFlight)
	}
	if cf.Rate < 0 {
		return nil, app.Badf("--rate %v: want 0 (no limit) or more rows a second", cf.Rate)
	}
	tlsConfig, err := cf.TLS.Config(cf.URL)
	if err != nil {
		return nil, app.Bad(err)
	}
	c, err := corecall.New(corecall.Config{BaseURL: cf.URL, Timeout: cf.Timeout, MaxIdleConns: cf.MaxInFlight, TLS: tlsConfig})
	if err != nil {
		return nil, app.Badf("--core: %w", err)
	}
	if w := c.PathWarning(); w != "" {
		slog.Warn("--core: "+w, "core", cf.URL)
	}
	return c, nil
}

// Connect makes the core client and opens the ledger, in that order, so
// that a bad --core is reported without touching the database. The caller
// closes the ledger.
func (c *Command) Connect(cf *CoreFlags) (*ledger.Ledger, *corecall.Client, error) {
	client, err := cf.Client()
	if err != nil {
		return nil, nil, err
	}
	l, err := c.Open()
	if err != nil {
		return nil, nil, err
	}
	return l, client, nil
}
