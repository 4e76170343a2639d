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
package corecall
