// Package tlsconf turns the TLS flags of the project's commands into
// *tls.Config values, the same way for every command: the core side
// (--core-ca, --core-cert, --core-key: relay, resolve, reprocess) and the
// channel side (--tls-cert, --tls-key, --tls-client-ca: relay), whose
// files can be re-read while the relay runs (Server.Reload).
//
// TLS 1.2 is the minimum on both sides, and only AEAD cipher suites are
// spoken (Harden): TLS 1.3's, and in TLS 1.2 the ECDHE suites with
// AES-GCM or ChaCha20-Poly1305. A file that is missing, holds no
// certificate, or a key that does not match its certificate is an error
// that names the flag and the file.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// MinVersion is the oldest TLS version spoken on either side.
const MinVersion = tls.VersionTLS12

// aeadSuites are the TLS 1.2 suites spoken: forward secrecy (ECDHE) and an
// AEAD cipher. CBC with SHA-1 (Lucky13 and the padding-oracle family) and
// the static-RSA key exchange are left out. TLS 1.3's suites are all AEAD
// and are not configurable.
var aeadSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// Harden makes cfg speak TLS 1.2 at least and AEAD suites only, whatever
// it said, and returns it. Every TLS configuration of the project, both
// sides, goes through it.
func Harden(cfg *tls.Config) *tls.Config {
	cfg.MinVersion = max(cfg.MinVersion, MinVersion)
	cfg.CipherSuites = aeadSuites
	return cfg
}

// CoreFiles are the files of the core side: the CA bundle the core's
// certificate must chain to (empty: the system pool) and the relay's
// client certificate and key (empty: none; the core may then refuse).
type CoreFiles struct {
	CA, Cert, Key string
}

// AddFlags registers --core-ca, --core-cert and --core-key on fs.
func (f *CoreFiles) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.CA, "core-ca", "", "PEM `file` of the CA certificates the core's certificate must chain to (https only; default the system's)")
	fs.StringVar(&f.Cert, "core-cert", "", "PEM `file` of the client certificate presented to the core (mTLS; with --core-key)")
	fs.StringVar(&f.Key, "core-key", "", "PEM `file` of the private key of --core-cert")
}

func (f CoreFiles) any() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Config returns the TLS configuration for calling the core at coreURL:
// nil for an http URL (then no file may be named), else one that trusts
// --core-ca (or the system pool) and presents --core-cert.
func (f CoreFiles) Config(coreURL string) (*tls.Config, error) {
	if !strings.HasPrefix(strings.ToLower(coreURL), "https://") {
		if f.any() {
			return nil, errors.New("--core-ca, --core-cert and --core-key need an https:// --core URL")
		}
		return nil, nil
	}
	cfg := Harden(&tls.Config{})
	if f.CA != "" {
		pool, _, err := loadPool(f.CA)
		if err != nil {
			return nil, fmt.Errorf("--core-ca: %w", err)
		}
		cfg.RootCAs = pool
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("--core-cert and --core-key go together")
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("--core-cert %s / --core-key %s: %w", f.Cert, f.Key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// LoadPool reads a PEM bundle of CA certificates. A file without a single
// certificate in it is an error: trusting nothing by mistake would refuse
// every peer with a misleading message.
func LoadPool(path string) (*x509.CertPool, error) {
	pool, _, err := loadPool(path)
	return pool, err
}

// loadPool is LoadPool that also returns the certificates.
func loadPool(path string) (*x509.CertPool, []*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		pool.AddCert(c)
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, nil, fmt.Errorf("%s: no PEM certificate in it", path)
	}
	return pool, certs, nil
}

// ServerFiles are the files of the channel side: the relay's certificate
// and key (both empty: plain TCP) and the CA bundle a channel's client
// certificate must chain to (empty: none asked for).
type ServerFiles struct {
	Cert, Key, ClientCA string
}

// AddFlags registers --tls-cert, --tls-key and --tls-client-ca on fs.
func (f *ServerFiles) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&f.Cert, "tls-cert", "", "PEM `file` of the certificate channels see: serve LH-STD over TLS (with --tls-key; re-read on SIGHUP)")
	fs.StringVar(&f.Key, "tls-key", "", "PEM `file` of the private key of --tls-cert")
	fs.StringVar(&f.ClientCA, "tls-client-ca", "", "PEM `file` of the CAs a channel's client certificate must chain to: require one (mTLS)")
}

// Enabled reports whether the channel side is served over TLS.
func (f ServerFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.ClientCA != "" }

// load reads the files into a configuration, and lists their
// certificates.
func (f ServerFiles) load() (*tls.Config, []Cert, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, nil, errors.New("--tls-cert and --tls-key go together (and --tls-client-ca needs them)")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert %s / --tls-key %s: %w", f.Cert, f.Key, err)
	}
	certs := []Cert{certOf("tls-cert", f.Cert, cert.Leaf)}
	cfg := Harden(&tls.Config{Certificates: []tls.Certificate{cert}})
	if f.ClientCA != "" {
		pool, cas, err := loadPool(f.ClientCA)
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		certs = append(certs, certsOf("tls-client-ca", f.ClientCA, cas)...)
	}
	return cfg, certs, nil
}

// Server is the channel side's TLS configuration, re-readable from its
// files while connections are served: each new connection's handshake uses
// the files as last loaded; connections already open keep theirs.
type Server struct {
	files ServerFiles
	cur   atomic.Pointer[tls.Config]
	certs atomic.Pointer[[]Cert] // of cur
	base  *tls.Config
}

// NewServer loads the files.
func NewServer(f ServerFiles) (*Server, error) {
	s := &Server{files: f}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	s.base = Harden(&tls.Config{
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load(), nil
		},
	})
	return s, nil
}

// Reload re-reads the files. If any of them is unusable, the configuration
// in force stays and the error says why.
func (s *Server) Reload() error {
	cfg, certs, err := s.files.load()
	if err != nil {
		return err
	}
	s.cur.Store(cfg)
	s.certs.Store(&certs)
	return nil
}

// Certs lists the certificates in force: the relay's and the client CAs'.
func (s *Server) Certs() []Cert { return *s.certs.Load() }

// Config is the configuration to serve with: every handshake picks up the
// files as last loaded.
func (s *Server) Config() *tls.Config { return s.base }

// ClientAuth reports whether channels must present a client certificate.
func (s *Server) ClientAuth() bool { return s.files.ClientCA != "" }

// Cert is a certificate loaded from a file: the relay's own, or one it
// trusts. Each is watched for its expiry (Soon, and the relay's metric).
type Cert struct {
	Flag     string // the flag that named the file, without dashes
	File     string
	Subject  string
	NotAfter time.Time
}

// ExpiryWarning is how long before a certificate expires the relay warns
// (and its alert fires): two weeks leave time to have a new one issued.
const ExpiryWarning = 14 * 24 * time.Hour

// Soon says whether c has expired or expires within ExpiryWarning of now.
func (c Cert) Soon(now time.Time) (expired, soon bool) {
	return !now.Before(c.NotAfter), now.Add(ExpiryWarning).After(c.NotAfter)
}

func certOf(flag, file string, c *x509.Certificate) Cert {
	return Cert{Flag: flag, File: file, Subject: c.Subject.String(), NotAfter: c.NotAfter}
}

func certsOf(flag, file string, cs []*x509.Certificate) []Cert {
	out := make([]Cert, 0, len(cs))
	for _, c := range cs {
		out = append(out, certOf(flag, file, c))
	}
	return out
}

// Certs lists the certificates the core side's files hold: the CAs of
// --core-ca and the client certificate of --core-cert.
func (f CoreFiles) Certs() ([]Cert, error) {
	var out []Cert
	if f.CA != "" {
		_, cas, err := loadPool(f.CA)
		if err != nil {
			return nil, fmt.Errorf("--core-ca: %w", err)
		}
		out = append(out, certsOf("core-ca", f.CA, cas)...)
	}
	if f.Cert != "" && f.Key != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("--core-cert %s / --core-key %s: %w", f.Cert, f.Key, err)
		}
		out = append(out, certOf("core-cert", f.Cert, cert.Leaf))
	}
	return out, nil
}
