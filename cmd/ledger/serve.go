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
	"time"

	"lhrelay/internal/app"
	"lhrelay/internal/cliflag"
	"lhrelay/internal/console"
	"lhrelay/internal/ledger"
	"lhrelay/internal/tlsconf"
)

// serveLog is where serve's access log goes.
var serveLog io.Writer = os.Stderr

// runServe is "ledger serve": the operator's console (package console)
// on a ledger opened read-only, until the process is stopped.
func runServe(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("ledger serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	db := fs.String("db", "", "ledger: SQLite `file` or postgres:// URL (required; opened read-only)")
	listen := fs.String("listen", "127.0.0.1:8088", "`address` to serve on, host:port; off the loopback it needs TLS and --tls-client-ca or --token-file")
	var files tlsconf.ServerFiles
	fs.StringVar(&files.Cert, "tls-cert", "", "PEM `file` of the console's certificate: serve HTTPS (with --tls-key)")
	fs.StringVar(&files.Key, "tls-key", "", "PEM `file` of the private key of --tls-cert")
	fs.StringVar(&files.ClientCA, "tls-client-ca", "", "PEM `file` of the CAs a client certificate must chain to: a verified certificate lets its subject in")
	tokenFile := fs.String("token-file", "", "`file` (mode 0600) of NAME TOKEN lines: a request with Authorization: Bearer TOKEN (or logged in with it) is NAME's")
	showAccounts := fs.Bool("show-accounts", false, "show account numbers whole (default: masked but for their last four digits)")
	var staleSent, refresh, auditEvery time.Duration
	cliflag.SecondsVar(fs, &staleSent, "stale-sent", 600*time.Second, "a SENT row older than this many `seconds` needs a person (resolve's --stale-sent)")
	maxAttempts := fs.Int("max-attempts", 3, "reprocess's --max-attempts: a FAILED/E902 row with this many attempts is out of them")
	cliflag.SecondsVar(fs, &refresh, "refresh", 5*time.Second, "read the overview's counts every this many `seconds`")
	cliflag.SecondsVar(fs, &auditEvery, "audit-every", 6*time.Hour, "audit every history chain at start and every this many `seconds` (0: at start only)")
	rest, err := cliflag.Read(fs, args, cliflag.Usage{Out: out, Text: usage + "\n\nflags of serve:\n"})
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return app.Badf("serve: %w", err)
	}
	if len(rest) > 0 {
		return app.Badf("serve: unexpected argument %q", rest[0])
	}
	if *db == "" {
		return app.Badf("serve: --db is required")
	}
	if *maxAttempts < 2 {
		return app.Badf("serve: --max-attempts must be at least 2, as reprocess's")
	}
	if refresh <= 0 {
		return app.Badf("serve: --refresh must be more than 0")
	}
	if auditEvery == 0 {
		auditEvery = -1 // console.Config: at start only
	}
	tlsOn := files.Cert != "" || files.Key != ""
	if err := console.CheckListen(*listen, tlsOn, files.ClientCA != "", *tokenFile != ""); err != nil {
		return app.Badf("serve: %w", err)
	}
	tlsCfg, err := console.TLSConfig(files)
	if err != nil {
		return app.Badf("serve: %w", err)
	}
	var tokens *console.Tokens
	if *tokenFile != "" {
		if tokens, err = console.ReadTokens(*tokenFile); err != nil {
			return app.Badf("serve: --token-file: %w", err)
		}
	}

	l, err := ledger.OpenReadOnly(*db)
	if err != nil {
		return app.Badf("serve: --db: %w", err)
	}
	defer l.Close()
	log := slog.New(slog.NewTextHandler(serveLog, nil))
	srv, err := console.New(console.Config{Ledger: l, ShowAccounts: *showAccounts, StaleSent: staleSent, MaxAttempts: *maxAttempts,
		Refresh: refresh, AuditEvery: auditEvery, Tokens: tokens, ClientCerts: files.ClientCA != "", Log: log})
	if err != nil {
		return err
	}
	defer srv.Close()

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return app.Badf("serve: --listen %s: %w", *listen, err)
	}
	scheme := "http"
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
		scheme = "https"
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("console: serving", "db", l.Path(), "store", l.Store(), "listen", ln.Addr().String(), "tls", tlsCfg != nil,
		"client_certs", files.ClientCA != "", "tokens", tokens != nil, "show_accounts", *showAccounts)
	fmt.Fprintf(out, "ledger serve listening on %s://%s\n", scheme, ln.Addr())
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return hs.Shutdown(sctx)
}
