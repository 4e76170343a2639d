package console

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
)

// Tokens are the bearer tokens the console accepts, each with the name
// its access is logged under.
type Tokens struct {
	byName []namedToken
}

type namedToken struct {
	name string
	sum  [sha256.Size]byte
}

// MinTokenLen is the shortest token accepted: 32 characters of a random
// token (openssl rand -hex 16) leave nothing to guess.
const MinTokenLen = 32

// ReadTokens reads a token file: one "NAME TOKEN" per line ('#' starts a
// comment). The file must be readable by its owner only (mode 0600 or
// stricter): a token anybody on the host can read lets anybody read
// account data under somebody else's name.
func ReadTokens(path string) (*Tokens, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %04o: a token file must be readable by its owner only (chmod 600)", path, perm)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t := &Tokens{}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("%s:%d: want NAME TOKEN", path, n)
		}
		if len(f[1]) < MinTokenLen {
			return nil, fmt.Errorf("%s:%d: the token of %s is shorter than %d characters", path, n, f[0], MinTokenLen)
		}
		if seen[f[0]] {
			return nil, fmt.Errorf("%s:%d: %s is named twice", path, n, f[0])
		}
		seen[f[0]] = true
		t.byName = append(t.byName, namedToken{f[0], sha256.Sum256([]byte(f[1]))})
	}
	if len(t.byName) == 0 {
		return nil, fmt.Errorf("%s holds no token", path)
	}
	return t, nil
}

// name is the name of token, and false for a token not in t. Every
// token is compared, in constant time, whatever matches.
func (t *Tokens) name(token string) (string, bool) {
	sum := sha256.Sum256([]byte(token))
	found := ""
	for _, nt := range t.byName {
		if subtle.ConstantTimeCompare(sum[:], nt.sum[:]) == 1 {
			found = nt.name
		}
	}
	return found, found != ""
}

// tokenCookie carries a token given on the login page, for a browser
// (which cannot send an Authorization header of its own).
const tokenCookie = "lhrelay_console_token"

// who is who made r: the verified client certificate's subject, or the
// name of the bearer token (Authorization header, or the login cookie).
// status is 0 when r proves who made it, 401 when it presents nothing,
// 403 when it presents a token the console does not know.
func (s *Server) who(r *http.Request) (who string, status int) {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.PeerCertificates) > 0 {
		return "cert " + r.TLS.PeerCertificates[0].Subject.String(), 0
	}
	if s.cfg.Tokens != nil {
		tok := ""
		if h := r.Header.Get("Authorization"); h != "" {
			t, found := strings.CutPrefix(h, "Bearer ")
			if !found {
				return "", http.StatusUnauthorized
			}
			tok = strings.TrimSpace(t)
		} else if c, err := r.Cookie(tokenCookie); err == nil {
			tok = c.Value
		}
		if tok != "" {
			if name, found := s.cfg.Tokens.name(tok); found {
				return "token " + name, 0
			}
			return "", http.StatusForbidden
		}
	}
	if !s.cfg.ClientCerts && s.cfg.Tokens == nil {
		// No authentication asked for: CheckListen allows that on the
		// loopback only.
		return "loopback " + r.RemoteAddr, 0
	}
	return "", http.StatusUnauthorized
}

// IsLoopback reports whether a listen address binds the loopback only: an
// IP of 127.0.0.0/8 or ::1, or the name localhost. An empty host ("":8088)
// binds every interface.
func IsLoopback(listen string) (bool, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false, err
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// ErrInsecure is CheckListen's refusal.
var ErrInsecure = errors.New("the console shows account data")

// CheckListen refuses a listen address off the loopback unless the
// console speaks TLS and asks every request for a client certificate or
// a bearer token.
func CheckListen(listen string, tls, clientCerts, tokens bool) error {
	lo, err := IsLoopback(listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", listen, err)
	}
	if lo {
		return nil
	}
	switch {
	case !tls:
		return fmt.Errorf("--listen %s is not the loopback: %w: it needs TLS (--tls-cert, --tls-key) and --tls-client-ca or --token-file", listen, ErrInsecure)
	case !clientCerts && !tokens:
		return fmt.Errorf("--listen %s is not the loopback: %w: it needs client certificates (--tls-client-ca) or tokens (--token-file)", listen, ErrInsecure)
	}
	return nil
}
