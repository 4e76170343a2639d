package batchcmd

import (
	"log/slog"
	"time"

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
}

// AddCoreFlags registers --core, --timeout, the core's TLS files and
// --trust-lookup-404 on c.
func (c *Command) AddCoreFlags() *CoreFlags {
	cf := &CoreFlags{}
	c.Flags.StringVar(&cf.URL, "core", "", "base `URL` of the core, e.g. http://127.0.0.1:9201 (required)")
	cliflag.PositiveSecondsVar(c.Flags, &cf.Timeout, "timeout", 5*time.Second, "bound on each core call, in `seconds`")
	cf.TLS.AddFlags(c.Flags)
	c.Flags.BoolVar(&cf.TrustLookup404, batch.TrustNotFoundFlag, false, batch.TrustNotFoundUsage)
	return cf
}

// Guard is the lookup guard these flags describe, for one run.
func (cf *CoreFlags) Guard() *batch.LookupGuard {
	if cf.TrustLookup404 {
		slog.Warn("--" + batch.TrustNotFoundFlag + ": every lookup answering 404 settles its row as never posted, unchecked; a wrong --core would make posted transfers resendable")
	}
	return &batch.LookupGuard{TrustNotFound: cf.TrustLookup404}
}

// Client checks the flags and makes the core client. Batch commands call
// the core one row at a time, so a small connection pool suffices.
func (cf *CoreFlags) Client() (*corecall.Client, error) {
	if cf.URL == "" {
		return nil, app.Badf("--core is required")
	}
	tlsConfig, err := cf.TLS.Config(cf.URL)
	if err != nil {
		return nil, app.Bad(err)
	}
	c, err := corecall.New(corecall.Config{BaseURL: cf.URL, Timeout: cf.Timeout, MaxIdleConns: 4, TLS: tlsConfig})
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
