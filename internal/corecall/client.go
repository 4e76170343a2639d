package corecall

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultTimeout         = 5 * time.Second
	DefaultConnectTimeout  = 2 * time.Second
	DefaultMaxIdleConns    = 256
	DefaultIdleConnTimeout = 30 * time.Second
)

// maxBody caps what is read of a core answer. The answers SPEC §3 describes
// are a few hundred bytes; a larger 200 is unusable (E901), and a larger
// error body is not needed.
const maxBody = 64 << 10

// DialFunc dials the core. It must honour ctx: Client gives it a context
// that ends at the connect timeout.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Config configures a Client.
type Config struct {
	// BaseURL is the core's base URL, e.g. http://127.0.0.1:9201.
	BaseURL string
	// Timeout bounds a whole call, from the moment it starts (dialling
	// included) to the last byte of the answer. Zero means DefaultTimeout.
	Timeout time.Duration
	// ConnectTimeout bounds the TCP connect. Zero means
	// DefaultConnectTimeout; it is never more than Timeout.
	ConnectTimeout time.Duration
	// MaxIdleConns is how many idle keep-alive connections to the core are
	// kept: about the number of calls that can be in flight at once. Zero
	// means DefaultMaxIdleConns.
	MaxIdleConns int
	// IdleConnTimeout closes a keep-alive connection idle this long. It
	// should be shorter than the core's own idle timeout, so that the relay
	// drops a connection before the core does and a call rarely meets a
	// connection the core is closing (which costs an E901). Zero means
	// DefaultIdleConnTimeout.
	IdleConnTimeout time.Duration
	// Dial replaces the TCP dialer (tests). Nil means a net.Dialer.
	Dial DialFunc
	// TLS configures the connections to an https core (trusted CAs, client
	// certificate); it is cloned per connection. Nil means the system's
	// CAs and no client certificate. Ignored for http.
	TLS *tls.Config

	// Log receives the warning for a core answering 404 to a call's path
	// (notFoundWarning); nil: none.
	Log *slog.Logger
}

// Client calls the core. It is safe for concurrent use; make one and share
// it, so that connections are reused.
type Client struct {
	base           string // BaseURL without a trailing slash, for the logs
	prefix         string // the base URL's escaped path without a trailing slash: every request target starts with it
	host           string // the Host header
	addr           string // host:port dialled
	timeout        time.Duration
	connectTimeout time.Duration
	dial           func(ctx context.Context, network, addr string) (*countingConn, error)
	pool           pool
	cancels        cancelWatch
	notFound       notFoundWarning
}

// New checks cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("corecall: core URL %q: %w", cfg.BaseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("corecall: core URL %q: want http://host:port", cfg.BaseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.ForceQuery {
		return nil, fmt.Errorf("corecall: core URL %q: no query, fragment or user info allowed", cfg.BaseURL)
	}
	prefix := strings.TrimSuffix(u.EscapedPath(), "/")
	if !validToken(u.Host) || (prefix != "" && !validToken(prefix)) {
		return nil, fmt.Errorf("corecall: core URL %q: host or path cannot be sent as they are", cfg.BaseURL)
	}
	if cfg.Timeout < 0 || cfg.ConnectTimeout < 0 || cfg.MaxIdleConns < 0 || cfg.IdleConnTimeout < 0 {
		return nil, errors.New("corecall: negative timeout or connection count")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	cfg.ConnectTimeout = min(cfg.ConnectTimeout, cfg.Timeout)
	if cfg.MaxIdleConns == 0 {
		cfg.MaxIdleConns = DefaultMaxIdleConns
	}
	if cfg.IdleConnTimeout == 0 {
		cfg.IdleConnTimeout = DefaultIdleConnTimeout
	}
	dial := cfg.Dial
	if dial == nil {
		d := &net.Dialer{KeepAlive: 30 * time.Second}
		dial = d.DialContext
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	c := &Client{
		base:           strings.TrimSuffix(u.String(), "/"),
		prefix:         prefix,
		host:           u.Host,
		addr:           net.JoinHostPort(u.Hostname(), port),
		timeout:        cfg.Timeout,
		connectTimeout: cfg.ConnectTimeout,
		pool:           pool{max: cfg.MaxIdleConns, idleTimeout: cfg.IdleConnTimeout},
		notFound:       notFoundWarning{log: cfg.Log},
	}
	if u.Scheme == "https" {
		c.dial = dialTLS(dial, cmp.Or(cfg.TLS, defaultTLS()))
	} else {
		c.dial = func(ctx context.Context, network, addr string) (*countingConn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: conn}, nil
		}
	}
	return c, nil
}

// dialConn dials a new connection for a call that must end by deadline:
// within the connect timeout, the TLS handshake included.
func (c *Client) dialConn(ctx context.Context, deadline time.Time) (*pconn, error) {
	ctx, cancel := context.WithDeadline(ctx, earliest(deadline, time.Now().Add(c.connectTimeout)))
	defer cancel()
	cc, err := c.dial(ctx, "tcp", c.addr)
	if err != nil {
		return nil, err
	}
	pc := newPconn(cc)
	pc.finishWatched = func() bool { return c.cancels.finish(pc) }
	return pc, nil
}

// CloseIdleConnections closes the keep-alive connections not in use.
func (c *Client) CloseIdleConnections() { c.pool.closeIdle() }

// PathWarning is a warning for a base URL with a path, or "" for one
// without: every call goes below that path (base/v1/transfers), and a core
// that serves its paths at the root answers each with 404, which the relay
// must record as E500. A gateway may want a prefix, so it is said at start
// rather than refused.
func (c *Client) PathWarning() string {
	u, err := url.Parse(c.base)
	if err != nil || u.Path == "" {
		return ""
	}
	return fmt.Sprintf("the core URL has a path, %q: every core call goes below it, and a core serving its paths at the root answers 404 (stored E500)", u.Path)
}

// notFoundWarning logs, at most once a minute, a core answering 404 to a
// call's path where the layout maps 404 to no outcome: the call is
// recorded E500 like any error, but a 404 for the path itself usually
// means the relay calls the wrong paths (a base URL with a path, a core
// of another version), which only the operator can fix.
type notFoundWarning struct {
	log  *slog.Logger
	last atomic.Int64 // unix nanoseconds of the last warning
	seen atomic.Int64 // 404s since it
}

const notFoundEvery = time.Minute

func (w *notFoundWarning) note(method, url string) {
	if w.log == nil {
		return
	}
	n := w.seen.Add(1)
	now := time.Now().UnixNano()
	last := w.last.Load()
	if last != 0 && now-last < int64(notFoundEvery) || !w.last.CompareAndSwap(last, now) {
		return
	}
	w.seen.Add(-n)
	w.log.Warn("the core answered 404 for a call's path: recorded E500; check that --core is the core's base URL", "method", method, "url", url, "count", n)
}
