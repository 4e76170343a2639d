package relay

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"time"
)

// handshake completes the TLS handshake of a channel connection served
// over TLS (Config.TLS), by the deadline by (FrameTimeout after the
// connection was accepted), before a byte of a frame is read; false means it failed and the connection must be closed unread.
// A client certificate the configuration requires and cannot verify (none,
// or one from another CA) fails it. The verified client certificate's
// subject is kept for the connection's log lines.
func (c *conn) handshake(by time.Time) bool {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return true
	}
	ctx, cancel := context.WithDeadline(c.s.base, by)
	defer cancel()
	start := time.Now()
	if err := tc.HandshakeContext(ctx); err != nil {
		if c.s.metrics != nil {
			c.s.metrics.TLSHandshakeFailed()
		}
		// Rate-limited like the other refusals: junk connections must not
		// turn into as many log lines; the metric counts each one.
		n := c.s.handshakeFailed.Add(1)
		if everySecond(&c.s.lastHandshakeLog) {
			c.s.log.Warn("connection closed unread: TLS handshake failed", "remote", c.remote, "err", err, "took_ms", millis(time.Since(start)), "failed_total", n)
		}
		return false
	}
	var leaf *x509.Certificate
	if peers := tc.ConnectionState().PeerCertificates; len(peers) > 0 {
		leaf = peers[0]
		c.client = leaf.Subject.String()
	}
	if c.s.clientOrgs != nil {
		c.orgs = c.s.clientOrgs.orgsFor(leaf)
	}
	c.s.log.Debug("TLS handshake done", "remote", c.remote, "client", c.client, "version", tls.VersionName(tc.ConnectionState().Version))
	return true
}
