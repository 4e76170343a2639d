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
// the result is unknown and must be settled by inquiry. The split rests on
// three facts, each enforced here rather than hoped for:
//
//  1. The transport writes a request only on a connection it has handed to
//     that request, and it reports every HTTP/1 hand-over through
//     httptrace.ClientTrace.GotConn before writing (HTTP/2, which reports
//     differently, is switched off). So a call that fails before GotConn
//     fired (refused, connect timeout, unresolvable host, the whole
//     --timeout spent dialling) sent nothing: E902.
//  2. Every connection is dialled by this package and wrapped in a
//     countingConn, which counts the bytes the kernel accepted. GotConn
//     notes the count; when the call fails without a response, the
//     connection is sealed (no further write can start) and the count
//     compared. Equal means not one byte of this request was handed to the
//     kernel: E902. Anything else, including a write in progress at that
//     instant, is E901. This is how a stale pooled connection is judged: a
//     write that the kernel refused outright (the core had reset it) sent
//     nothing and is E902; a write the kernel accepted before the EOF or
//     reset showed up may have reached the core and is E901.
//  3. The transport never sends the request a second time. net/http retries
//     a request on a fresh connection only when it can replay it: a body
//     with GetBody set, or a method it deems idempotent with no body
//     (Transport.roundTrip, persistConn.shouldRetryRequest). Every request
//     here carries a non-nil body without GetBody — an empty one for a GET —
//     so no request is replayable and none is retried; a core call is made
//     once even when it is an inquiry. If GotConn ever fires twice for one
//     call anyway, the call is classified E901 and Result.Err says so.
//
// Once a response status line has arrived, the core has seen the request;
// from then on the status and body decide (classify), and any failure
// reading the body of a 200 is E901.
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
