package corecall

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"lhrelay/internal/tlsconf"
)

// dialTLS returns the dialer of an https core's connections. It makes the
// TLS handshake inside the dial, so that the E901/E902
// split of the package comment holds over TLS as it does over TCP:
//
//   - The handshake happens before the connection is handed to a call
//     (fact 1 of the package comment). A handshake that fails — an untrusted
//     certificate, a client certificate the core refuses, a core that
//     never answers the ClientHello within the connect timeout — fails the
//     dial: not a byte of the request was written, E902.
//   - The connection returned is the *tls.Conn wrapped in a countingConn,
//     which counts the plaintext bytes tls.Conn.Write reports written.
//     tls.Conn counts a record's bytes only once the whole record was
//     handed to the kernel, so a count that did not move means no complete
//     record of the request left the relay, and a partial record cannot be
//     decrypted by the core: nothing of the request can have reached it.
//     A write in progress when the call failed still counts as maybe
//     sent (sealNothingWritten), as over TCP.
//
// TLS 1.3 is spoken when the core speaks it (1.2 otherwise), with AEAD
// suites only (tlsconf.Harden). In TLS 1.3 the client's handshake is over
// before the server has checked the client's certificate: a core that
// refuses the relay's certificate (or wants one and got none) says so with
// an alert that arrives after the request was written. That alert, read
// as the first thing on a fresh TLS 1.3 connection, still proves that
// nothing was processed: a server that refuses the client's certificate
// aborts the handshake, and no TLS server processes application data
// before its handshake is complete (no 0-RTT data is ever sent). So such
// a call is E902 (countingConn.refusedCert, Client.exchange); anything
// else read first, a refusal on a reused connection, or a certificate
// alert on a TLS 1.2 connection keeps the byte count's verdict.
// TestTLS13CoreRefusesClientCertificate shows it against a TLS 1.3 core.
//
// The connect timeout bounds the TCP connect and the handshake together
// (ctx ends with it, Client.dialConn). The configuration is cloned for each connection; ServerName defaults to
// the host dialled, and HTTP/1.1 is the only protocol offered (fact 1).
func dialTLS(dial DialFunc, base *tls.Config) func(ctx context.Context, network, addr string) (*countingConn, error) {
	return func(ctx context.Context, network, addr string) (*countingConn, error) {
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := base.Clone()
		if cfg.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = host
			}
		}
		tlsconf.Harden(cfg)
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		return &countingConn{Conn: tc, tls13: tc.ConnectionState().Version == tls.VersionTLS13}, nil
	}
}

// defaultTLS is the configuration for an https core when none is given:
// the system's trusted CAs, no client certificate.
func defaultTLS() *tls.Config { return tlsconf.Harden(&tls.Config{}) }
