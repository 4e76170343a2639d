package console

import (
	"crypto/tls"
	"errors"
	"fmt"

	"lhrelay/internal/tlsconf"
)

// TLSConfig is the HTTPS configuration of --tls-*: nil for plain HTTP.
// A client certificate is asked for but not required at the handshake,
// so that a request without one gets its 401 and is logged.
func TLSConfig(f tlsconf.ServerFiles) (*tls.Config, error) {
	if f.Cert == "" && f.Key == "" {
		if f.ClientCA != "" {
			return nil, errors.New("--tls-client-ca needs --tls-cert and --tls-key")
		}
		return nil, nil
	}
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s / --tls-key %s: %w", f.Cert, f.Key, err)
	}
	cfg := tlsconf.Harden(&tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}})
	if f.ClientCA != "" {
		pool, err := tlsconf.LoadPool(f.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}
