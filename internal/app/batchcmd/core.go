package batchcmd

import (
	"log/slog"
	"time"

	"lhrelay/internal/app"
	"lhrelay/internal/cliflag"
	"lhrelay/internal/corecall"
	"lhrelay/internal/ledger"
	"lhrelay/internal/tlsconf"
)

// CoreFlags are the core connection flags of resolve and reprocess.
type CoreFlags struct {
	URL     string
	Timeout time.Duration
	TLS     tlsconf.CoreFiles // --core-ca, --core-cert, --core-key, as the relay takes them
}

// AddCoreFlags registers --core and --timeout on c.
func (c *Command) AddCoreFlags() *CoreFlags {
	cf := &CoreFlags{}
	c.Flags.StringVar(&cf.URL, "core", "", "base `URL` of the core, e.g. http://127.0.0.1:9201 (required)")
	cliflag.PositiveSecondsVar(c.Flags, &cf.Timeout, "timeout", 5*time.Second, "bound on each core call, in `seconds`")
	cf.TLS.AddFlags(c.Flags)
	return cf
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
