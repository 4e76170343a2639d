// Package tlsconf turns the TLS flags of the project's commands into
// *tls.Config values, the same way for every command: the core side
// (--core-ca, --core-cert, --core-key: relay, resolve, reprocess) and the
// channel side (--tls-cert, --tls-key, --tls-client-ca: relay), whose
// files can be re-read while the relay runs (Server.Reload).
//
// TLS 1.2 is the minimum on both sides. A file that is missing, holds no
// certificate, or a key that does not match its certificate is an error
// that names the flag and the file.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
)

// MinVersion is the oldest TLS version spoken on either side.
const MinVersion = tls.VersionTLS12

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
	cfg := &tls.Config{MinVersion: MinVersion}
	if f.CA != "" {
		pool, err := LoadPool(f.CA)
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
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", path)
	}
	return pool, nil
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

// load reads the files into a configuration.
func (f ServerFiles) load() (*tls.Config, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("--tls-cert and --tls-key go together (and --tls-client-ca needs them)")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s / --tls-key %s: %w", f.Cert, f.Key, err)
	}
	cfg := &tls.Config{MinVersion: MinVersion, Certificates: []tls.Certificate{cert}}
	if f.ClientCA != "" {
		pool, err := LoadPool(f.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Server is the channel side's TLS configuration, re-readable from its
// files while connections are served: each new connection's handshake uses
// the files as last loaded; connections already open keep theirs.
type Server struct {
	files ServerFiles
	cur   atomic.Pointer[tls.Config]
	base  *tls.Config
}

// NewServer loads the files.
func NewServer(f ServerFiles) (*Server, error) {
	s := &Server{files: f}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	s.base = &tls.Config{
		MinVersion: MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load(), nil
		},
	}
	return s, nil
}

// Reload re-reads the files. If any of them is unusable, the configuration
// in force stays and the error says why.
func (s *Server) Reload() error {
	cfg, err := s.files.load()
	if err != nil {
		return err
	}
	s.cur.Store(cfg)
	return nil
}

// Config is the configuration to serve with: every handshake picks up the
// files as last loaded.
func (s *Server) Config() *tls.Config { return s.base }

// ClientAuth reports whether channels must present a client certificate.
func (s *Server) ClientAuth() bool { return s.files.ClientCA != "" }
