package console

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"lhrelay/internal/ledger"
)

//go:embed assets templates
var files embed.FS

// Config is a console to serve.
type Config struct {
	// Ledger is read through; open it with ledger.OpenReadOnly.
	Ledger *ledger.Ledger
	// ShowAccounts shows account numbers whole (--show-accounts).
	ShowAccounts bool
	// StaleSent is how long a SENT row may wait before it needs a person
	// (resolve's --stale-sent; default 600 s).
	StaleSent time.Duration
	// MaxAttempts is reprocess's --max-attempts: a FAILED/E902 row with
	// as many attempts is out of attempts (default 3).
	MaxAttempts int
	// Refresh is how often the overview's counts are read again (default
	// 5 s; at most a tenth of the time, whatever it says); AuditEvery how
	// often the whole history is audited (the first audit runs at start;
	// negative: at start only; default 6 h).
	Refresh, AuditEvery time.Duration
	// PageSize is how many rows a list page shows (default 50).
	PageSize int
	// Tokens, when set, are the bearer tokens accepted; ClientCerts says
	// that the TLS side verifies client certificates. With neither, every
	// request is served (CheckListen allows it on the loopback only).
	Tokens      *Tokens
	ClientCerts bool
	// Log receives the access log: every GUID page viewed and every
	// request refused, with who asked.
	Log *slog.Logger
}

// Server is the console's HTTP handler.
type Server struct {
	cfg   Config
	l     *ledger.Ledger
	log   *slog.Logger
	pages map[string]*template.Template
	mux   *http.ServeMux

	mu       sync.Mutex
	overview *Overview // nil until the first read
	audit    AuditResult
	fresh    chan struct{} // closed and renewed at each new overview

	stop context.CancelFunc
	done sync.WaitGroup
}

// New starts a console's background reads (the overview's counts, the
// audit); Close stops them.
func New(cfg Config) (*Server, error) {
	if cfg.Ledger == nil {
		return nil, errors.New("console: no ledger")
	}
	if cfg.StaleSent <= 0 {
		cfg.StaleSent = 600 * time.Second
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = 5 * time.Second
	}
	switch {
	case cfg.AuditEvery == 0:
		cfg.AuditEvery = 6 * time.Hour
	case cfg.AuditEvery < 0:
		cfg.AuditEvery = 0 // at start only
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = 50
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, l: cfg.Ledger, log: cfg.Log, fresh: make(chan struct{})}
	if err := s.parseTemplates(); err != nil {
		return nil, err
	}
	s.routes()
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	s.done.Add(2)
	go s.refreshLoop(ctx)
	go s.auditLoop(ctx)
	return s, nil
}

// Close stops the background reads and waits for them.
func (s *Server) Close() {
	s.stop()
	s.done.Wait()
}

func (s *Server) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(files, "assets")
	m.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	m.HandleFunc("GET /{$}", s.pageOverview)
	m.HandleFunc("GET /needs", s.pageNeeds)
	m.HandleFunc("GET /guid/{guid}", s.pageGUID)
	m.HandleFunc("GET /search", s.pageSearch)
	m.HandleFunc("GET /api/overview", s.apiOverview)
	m.HandleFunc("GET /login", s.pageLogin)
	m.HandleFunc("POST /login", s.postLogin)
	s.mux = m
}

// csp allows only the console's own script, style and images: no inline
// script or style, no other origin, no framing, forms to itself only.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// ServeHTTP sets the security headers, refuses a request that proves
// nobody (401, logged), and serves the page.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	// Pages hold account data: no cache keeps them.
	h.Set("Cache-Control", "no-store")
	if r.TLS != nil {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
	open := strings.HasPrefix(r.URL.Path, "/assets/") || r.URL.Path == "/login"
	who, status := s.who(r)
	if status != 0 && !open {
		s.log.Warn("console: request refused", "status", status, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr,
			"why", map[int]string{http.StatusUnauthorized: "no client certificate or token", http.StatusForbidden: "unknown token"}[status])
		if s.cfg.Tokens != nil {
			h.Set("WWW-Authenticate", `Bearer realm="lhrelay console"`)
		}
		msg := "401 unauthorized: present a client certificate or a bearer token (or log in at /login)"
		if status == http.StatusForbidden {
			msg = "403 forbidden: the token is not one of this console's"
		}
		http.Error(w, msg, status)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), whoKey{}, who))
	s.mux.ServeHTTP(w, r)
}

type whoKey struct{}

func whoOf(r *http.Request) string {
	w, _ := r.Context().Value(whoKey{}).(string)
	return w
}
