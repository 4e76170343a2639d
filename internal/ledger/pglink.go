package ledger

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Link says how far the connection to the ledger can be trusted (SPEC 6a):
// whoever sits on the link to a shared ledger can rewrite row states and
// have transfers posted twice.
type Link string

const (
	// LinkFile: a SQLite file, no network link.
	LinkFile Link = "file"
	// LinkLoopback: every host of the URL is the loopback or a Unix
	// socket. Nobody sits on that link who could not read the ledger's
	// memory anyway, so the URL's sslmode (libpq's default, prefer, when
	// it states none) is kept as it is.
	LinkLoopback Link = "loopback"
	// LinkVerified: every connection is TLS with the server's certificate
	// verified (sslmode verify-full, or verify-ca).
	LinkVerified Link = "verified"
	// LinkUnverified: a connection to a host other than the loopback may
	// be plaintext or take any certificate, because the URL says so
	// (sslmode disable, allow, prefer or require, stated explicitly).
	LinkUnverified Link = "unverified"
)

// Link is how the connection to the ledger can be trusted.
func (l *Ledger) Link() Link {
	if p, ok := l.st.(*pgStore); ok {
		return p.link
	}
	return LinkFile
}

// errUnparsable replaces pgx's parse error for a URL that holds a
// password: pgx's text masks passwords only on a best-effort basis, and an
// unencoded '/' or '@' in a password makes the URL ambiguous, so that part
// of it may be shown.
var errUnparsable = errors.New("bad PostgreSQL URL: it cannot be parsed (its text is not shown: it holds a password; / ? # @ : % and spaces in a password must be percent-encoded, e.g. %2F for /)")

// parsedURL is a ledger URL as parsed, with what is shown of it and what
// its link is.
type parsedURL struct {
	cfg   *pgxpool.Config
	shown string // displayURL
	link  Link
}

// parseURL parses a ledger URL as pgx does, after two decisions of its own:
// a URL that reaches a host other than the loopback and states no sslmode
// gets verify-full (SPEC 6a), and a password taken from a password file
// readable by others is refused (checkPassfile).
func parseURL(rawURL string) (parsedURL, error) {
	// An '@' left after the user:password@ part pgx finds means a password
	// holding an unencoded '@' or '/': pgx would take part of it for a
	// host or a database name, to be shown in every message.
	if _, rest := afterUserinfo(rawURL); strings.Contains(strings.SplitN(rest, "?", 2)[0], "@") {
		return parsedURL{}, errUnparsable
	}
	pcfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return parsedURL{}, parseError(rawURL, err)
	}
	if !allLoopback(pcfg.ConnConfig.Config) && !statesSSLMode(rawURL) {
		rawURL = withQueryParam(rawURL, "sslmode", "verify-full")
		if pcfg, err = pgxpool.ParseConfig(rawURL); err != nil {
			return parsedURL{}, parseError(rawURL, err)
		}
	}
	if err := checkPassfile(rawURL, pcfg.ConnConfig.Password); err != nil {
		return parsedURL{}, err
	}
	link := LinkLoopback
	switch {
	case !allLoopback(pcfg.ConnConfig.Config) && verified(pcfg.ConnConfig.Config):
		link = LinkVerified
	case !allLoopback(pcfg.ConnConfig.Config):
		link = LinkUnverified
	}
	return parsedURL{cfg: pcfg, shown: displayURL(rawURL, pcfg.ConnConfig.Config), link: link}, nil
}

// parseError is pgx's parse error, unless rawURL holds a password.
func parseError(rawURL string, err error) error {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) && holdsPassword(rawURL) {
		return errUnparsable
	}
	return err
}

// holdsPassword reports whether the URL carries a password: in its
// user:password@ part or as a password (or sslpassword) parameter.
func holdsPassword(rawURL string) bool {
	head, _ := afterUserinfo(rawURL)
	_, userinfo, _ := strings.Cut(head, "://")
	if strings.Contains(userinfo, ":") {
		return true
	}
	return strings.Contains(strings.ToLower(queryOf(rawURL)), "password=")
}

// allLoopback reports whether every host the configuration may connect to
// (fallbacks included) is the loopback or a Unix socket.
func allLoopback(c pgconn.Config) bool {
	if !isLoopback(c.Host) {
		return false
	}
	for _, f := range c.Fallbacks {
		if !isLoopback(f.Host) {
			return false
		}
	}
	return true
}

func isLoopback(host string) bool {
	if strings.HasPrefix(host, "/") || strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// verified reports whether every connection the configuration may make is
// TLS with the server's certificate checked: verify-full checks it with
// the standard verification, verify-ca with pgx's VerifyPeerCertificate.
func verified(c pgconn.Config) bool {
	checks := func(tc *tls.Config) bool {
		return tc != nil && (!tc.InsecureSkipVerify || tc.VerifyPeerCertificate != nil)
	}
	if !checks(c.TLSConfig) {
		return false
	}
	for _, f := range c.Fallbacks {
		if !checks(f.TLSConfig) {
			return false
		}
	}
	return true
}

// statesSSLMode reports whether the operator stated an sslmode: in the
// URL (sslmode, or its alias ssl=true), or in PGSSLMODE, which pgx reads
// as libpq does.
func statesSSLMode(rawURL string) bool {
	if os.Getenv("PGSSLMODE") != "" {
		return true
	}
	for _, kv := range strings.Split(queryOf(rawURL), "&") {
		k, _, _ := strings.Cut(kv, "=")
		if k, err := url.QueryUnescape(k); err == nil && (k == "sslmode" || k == "ssl") {
			return true
		}
	}
	return false
}

// afterUserinfo is the URL past its scheme and user:password@, found the
// way pgx finds it (the first '@' or '/' decides), so that a '?' in a
// password is never taken for the start of the query.
func afterUserinfo(rawURL string) (head, rest string) {
	_, rest, _ = strings.Cut(rawURL, "://")
	head = rawURL[:len(rawURL)-len(rest)]
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		head += rest[:i+1]
		rest = rest[i+1:]
	}
	return head, rest
}

func queryOf(rawURL string) string {
	_, rest := afterUserinfo(rawURL)
	_, q, _ := strings.Cut(rest, "?")
	return q
}

// withQueryParam adds k=v to the URL's query.
func withQueryParam(rawURL, k, v string) string {
	head, rest := afterUserinfo(rawURL)
	sep := "?"
	if strings.Contains(rest, "?") {
		sep = "&"
	}
	return head + rest + sep + url.QueryEscape(k) + "=" + url.QueryEscape(v)
}

// checkPassfile refuses a connection whose password pgx takes from a
// password file readable by group or others. libpq ignores such a file,
// with a warning; pgx reads it whatever its mode, so a ledger password
// anyone on the host can read would be used: it is refused instead,
// naming the file. A file that gives this connection nothing is never
// refused, whatever its mode: the URL (or PGPASSWORD, or a service file)
// gives the password, or no entry matches the connection (certificate
// authentication, a file that serves other databases). The file is the
// URL's passfile, else PGPASSFILE, else ~/.pgpass, as pgx finds it;
// password is the one pgx's configuration holds.
func checkPassfile(rawURL, password string) error {
	if !passwordFromFile(rawURL, password) {
		return nil
	}
	path, what := passfileParam(rawURL), "passfile"
	if path == "" {
		path, what = os.Getenv("PGPASSFILE"), "PGPASSFILE"
	}
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil
		}
		path, what = filepath.Join(home, ".pgpass"), "password file"
	}
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() {
		return nil
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s %s gives the ledger's password and is readable by group or others (%s): chmod 0600 it", what, path, st.Mode().Perm())
	}
	return nil
}

// passwordFromFile reports whether pgx took password, the connection's,
// from its password file: the same URL read with the empty file
// (os.DevNull; pgx takes a parameter's last occurrence) gives none. pgx
// decides where a password comes from (the URL, PGPASSWORD, a service
// file, then the first entry of the file that matches the first host,
// port, database and user); asking it again keeps that order its own.
func passwordFromFile(rawURL, password string) bool {
	if password == "" {
		return false
	}
	without, err := pgxpool.ParseConfig(withQueryParam(rawURL, "passfile", os.DevNull))
	if err != nil {
		return true // cannot tell: as if it did
	}
	return without.ConnConfig.Password == ""
}

// passfileParam is the URL's passfile parameter (its last occurrence, as
// pgx reads it), "" when it has none.
func passfileParam(rawURL string) string {
	path := ""
	for _, kv := range strings.Split(queryOf(rawURL), "&") {
		if k, v, _ := strings.Cut(kv, "="); unescaped(k) == "passfile" {
			path = unescaped(v)
		}
	}
	return path
}

// unescaped is a query key or value percent-decoded as pgx decodes it
// (a '+' stays a '+'), or as it is when it cannot be.
func unescaped(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}

// displayURL is the URL to show in logs and messages, built from the parsed
// configuration (user, hosts and ports, database) and the URL's query
// without its secrets (password, sslpassword): never the password,
// whatever characters it holds. It is still a URL that connects (a test
// or an operator may paste it), given the password from elsewhere.
func displayURL(rawURL string, c pgconn.Config) string {
	scheme, _, _ := strings.Cut(rawURL, "://")
	hosts := []string{hostPort(c.Host, c.Port)}
	for _, f := range c.Fallbacks {
		if hp := hostPort(f.Host, f.Port); hp != hosts[len(hosts)-1] {
			hosts = append(hosts, hp)
		}
	}
	user := ""
	if c.User != "" {
		user = url.User(c.User).String() + "@"
	}
	var kept []string
	if q := queryOf(rawURL); q != "" {
		for _, kv := range strings.Split(q, "&") {
			k, _, _ := strings.Cut(kv, "=")
			if k, err := url.QueryUnescape(k); err != nil || k == "password" || k == "sslpassword" {
				continue
			}
			kept = append(kept, kv)
		}
	}
	shown := scheme + "://" + user + strings.Join(hosts, ",") + "/" + url.PathEscape(c.Database)
	if len(kept) > 0 {
		shown += "?" + strings.Join(kept, "&")
	}
	return shown
}

func hostPort(host string, port uint16) string {
	if strings.HasPrefix(host, "/") {
		return url.PathEscape(host) // a Unix socket's directory
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// scrubbed is an error whose text never holds secret; errors.Is and As see
// the error it wraps.
type scrubbed struct {
	err    error
	secret string
}

func (s scrubbed) Error() string {
	if s.secret == "" {
		return s.err.Error()
	}
	return strings.ReplaceAll(s.err.Error(), s.secret, "xxxxx")
}

func (s scrubbed) Unwrap() error { return s.err }
