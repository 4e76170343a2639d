// Package coresim is a stand-in for the bank's core account system (SPEC §3 and
// §8), used by the demo, the relay's tests and its benchmarks. New returns an
// http.Handler; cmd/coresim serves it on a port.
//
// Endpoints:
//
//	POST /v1/transfers               post a transfer (header X-GUID, JSON body)
//	GET  /v1/transfers/{guid}        the first posted transfer with that GUID, or 404
//	GET  /v1/accounts/{bank}/{acct}  an account's balance, or 404
//	GET  /_stats                     {"calls":N,"by_guid":{...}} for POST /v1/transfers
//	POST /_reset                     zero the statistics (204)
//
// An unknown path answers 404 and a known path with the wrong method 405
// (with an Allow header), both in net/http's plain-text form.
//
// # Transfers
//
// The core is deliberately not idempotent: every accepted POST with the same
// GUID is a new transfer, debited again. The rules, checked in this order:
//
//  1. Invalid input → 400 {"error":"..."}, nothing posted. Invalid means: a body
//     that is not exactly one JSON object; an unknown key (rejected rather than
//     ignored, so that a relay sending a misspelt key fails loudly in tests); a
//     body over 64 KiB; guid missing or not 32 lowercase hex digits; the X-GUID
//     header missing or different from the body's guid; wdBank, wdAcct, dpBank or
//     dpAcct missing or empty; amount missing, not a JSON integer literal
//     (1.5, 1e3, "100" and null are all refused), out of int64 range, or <= 0.
//     memo may be empty or absent. Content-Type is not checked.
//  2. memo starting with "FAIL" → 500 {"error":...}, nothing posted.
//  3. memo starting with "SLOW" → wait Config.Delay, then go on, whether or not
//     the caller is still there (the point is to let a relay time out on a
//     transfer that does get posted).
//  4. Withdrawal account unknown, or wdBank not "LHB" → 422 NO_ACCOUNT.
//  5. amount > Config.Limit → 422 LIMIT_EXCEEDED.
//  6. amount > the withdrawal balance → 422 INSUFFICIENT_FUNDS.
//  7. Otherwise debit the withdrawal account, credit the deposit account if it
//     is an existing LHB account (other banks' accounts are outside this core),
//     and answer 200 {"guid","txId","balance","postedAt"}: txId is "T" followed
//     by a 15-digit sequence number that restarts at 1 with the process;
//     balance is the withdrawal account's balance after the debit; postedAt is
//     Config.Now formatted YYYYMMDDhhmmss in the time's own location (local
//     time by default).
//
// Memo prefixes are case-sensitive. Steps 4–7 happen under one lock, so
// concurrent transfers never lose an update or overdraw an account.
//
// # Statistics
//
// Every POST /v1/transfers is counted in calls as soon as it arrives, whatever
// its outcome (400s included), because the statistics answer "how many times did
// the relay call the core", not "how many transfers were posted". by_guid counts
// the same calls under their X-GUID header, when that header is a well-formed
// GUID; a call without one is counted in calls only. POST /_reset (and
// Server.Reset) zeroes the statistics only: balances and posted transfers stay,
// as they are the core's books. Restart the process (or call New) for fresh
// books.
//
// # Faults and the truth log (for cmd/verify)
//
// Config.Truth receives the core's ground truth as JSON lines (TruthEvent):
// every POST /v1/transfers that arrived, every posting with the request it
// posted and the answer it made, every lookup answered. Server.Arm makes the
// next requests misbehave (Fault: a delay, 500, 504 or a reset after
// posting, a reset without posting, a garbled 200, a 200 about another GUID,
// accept-then-hang, a lookup 200 about another GUID). Neither is reachable
// through the core's API: cmd/coresim serves the controls
// (Server.ControlHandler) only on a loopback listener of their own, with
// --control, and writes the truth log only with --truth.
//
// Posted transfers are kept in memory for GET /v1/transfers/{guid}: about a
// hundred bytes per distinct GUID, for the life of the process.
//
// # Capacity
//
// Config.MaxConcurrent serves that many requests to /v1/ at once, each for
// Config.Service, and queues the rest in their turn (a core at its
// capacity). With Config.RefuseBeyond a request that finds every place
// taken is answered at once 503 {"error":"at capacity"} with Retry-After: 1
// and nothing posted (a core, or its gateway, that sheds load); it is
// counted in the statistics as a call, and in Server.Refused.
//
// # Arrivals
//
// Config.Arrived is called as each request to /v1/ reaches the core, before
// anything else happens to it: the one place an in-process test notices a
// call at the core and holds it there (testkit.Gate). A test of a coresim
// process reads the statistics instead.
package coresim
