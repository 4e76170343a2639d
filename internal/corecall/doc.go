// Package corecall makes the one HTTP call to the core banking system that
// an LH-STD request turns into, and says what came of it as a
// generated.Source (SPEC §4, §5.5), and the lookup that settles an unknown
// outcome (Lookup, the GET each transaction's layout declares). The relay
// and the batch commands (reprocess sends stored requests through Call;
// resolve uses Lookup) share it so that a request is classified the same
// way whoever sends it.
//
// # Sent or not sent: how E901 and E902 are kept apart
//
// CONNECT_FAIL (E902) tells a channel that it may resend with the same GUID,
// so it is given only when no byte of the request can have reached the core.
// Everything else that goes wrong after that point is READ_TIMEOUT (E901):
// the result is unknown and must be settled by inquiry. The client is this
// package's own HTTP/1.1 client (http1.go, pool.go, Client.exchange), and
// the split rests on three facts, each enforced here rather than hoped for:
//
//  1. A call holds its connection before it writes anything, and holds it
//     alone: either dialled for it (Client.dialConn) or taken out of the
//     pool (pool.get), which hands an idle connection to one call only,
//     and a watched one only once its watcher has stopped reading it. So
//     a call that fails before it has a connection — refused,
//     connect timeout, unresolvable host, a TLS handshake that fails, ctx
//     ended before any of it — wrote nothing: E902.
//  2. Every connection is dialled by this package and wrapped in a
//     countingConn, which counts the bytes the kernel accepted. The call
//     notes the count (mark), then writes the whole request in one Write,
//     on its own goroutine, the only writer: the previous call's write on
//     a pooled connection ended before that call read its answer, the
//     watcher only reads, and a ctx ending only moves the deadline. A
//     Write that fails having accepted no byte (net.Conn's contract, which
//     Go's netFD honours) leaves the count at the mark: the connection is
//     sealed (no further write can start) and closed, and the call is
//     E902. This is how a stale pooled connection is judged: a write that
//     the kernel refused outright (the core had reset it) sent nothing.
//     Any other failure before a response — a write that accepted some
//     bytes, an EOF, a reset or the deadline while waiting for the
//     answer — is E901 (the count moved past the mark); the one exception
//     is the TLS 1.3 certificate refusal described below.
//  3. Nothing sends a request a second time. Client.exchange writes once
//     and has no loop around the write; pool.get skips and closes idle
//     connections the core has closed before any byte of the call is
//     written on them; a connection goes back to the pool only after its
//     answer was read completely, so a late answer can never be taken for
//     the next call's. A core call is made once even when it is an
//     inquiry.
//
// A write that failed after some bytes leaves the call waiting a moment
// (writeFailedGrace) for an answer the core may already have sent: a
// response is a response, and its status decides, as below.
//
// A connection the core closed while it idled (its idle timeout, a
// restart) is not handed to a call when that can be known: a plain TCP
// connection is peeked at without blocking when a call takes it, any
// other has a goroutine blocked in a one-byte read while it idles
// (pool.go). Either way a connection on which the core closed, reset or
// sent anything is closed unused, before a byte of the call is written. A
// call can still meet a connection the core closes at the very moment it
// is taken; the byte count then decides, as for any connection.
//
// Once a response status line has arrived, the core has seen the request;
// from then on the status and body decide (classify), and any failure
// reading the body of a 200 is E901.
//
// The whole call, from taking a connection to the last byte of the answer,
// ends by its deadline (the client's timeout, or ctx's deadline if sooner),
// set on the connection; ctx ending sooner moves that deadline into the
// past (cancelWatch), so no goroutine is started per call.
//
// The base URL must reach the core directly: no proxy is used (an HTTP
// proxy would make "connected" mean connected to the proxy). Over https
// the same facts hold: the handshake is part of the dial, and the bytes
// counted are those of the request written into the TLS connection (see
// dialTLS).
//
// # TLS 1.3 and a refused client certificate
//
// TLS 1.3 is spoken when the core speaks it. In TLS 1.3 the client's side
// of the handshake is over before the server has checked the client's
// certificate, so a core that refuses the relay's certificate says so
// with an alert that arrives after the request was written: by the byte
// count alone that call would be E901, for every call, as long as the
// certificate is refused. But a server that refuses a client certificate
// aborts its handshake, and no TLS server processes application data
// before its handshake is complete (the relay sends no 0-RTT data). So a
// certificate alert (handshake_failure, bad_certificate,
// unsupported_certificate, certificate_revoked, certificate_expired,
// certificate_unknown, unknown_ca, access_denied, decrypt_error,
// certificate_required) read as the first thing on a fresh TLS 1.3
// connection proves that nothing of the request was processed: E902. On
// a reused connection, after any byte of a response, or in TLS 1.2 (where
// such an alert after the handshake would come from a renegotiation, which
// a server may start after reading the request), the byte count decides,
// so the answer stays E901 whenever there is doubt.
// TestTLS13CoreRefusesClientCertificate shows it against a TLS 1.3 core;
// TLS 1.2 cores still refuse within the handshake (E902 at the dial).
// Both versions use AEAD cipher suites only (tlsconf.Harden).
package corecall
