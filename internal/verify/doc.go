// Package verify runs seeded fault schedules against real relay processes
// and checks every history against the core's ground truth (cmd/verify).
//
// # A schedule
//
// A schedule is drawn from a PCG seeded with (seed, schedule index): the
// same seed gives the same business transactions (GUIDs, bodies, when each
// starts, how many attempts, which relay each goes to, which are sent twice
// at once or re-sent with another body) and the same faults at the same
// offsets. Timing on a real machine varies; the schedule does not.
//
// The processes are real: relays, resolve, reprocess and purge built from
// this tree, cmd/coresim with its truth log and fault controls, a SQLite file
// or a schema on a throwaway PostgreSQL server (internal/pgtest). Channels
// dial a relay per attempt and retry like real ones: after E901, E902, E903,
// a timeout or a dropped connection, with the same GUID, a bounded number of
// times. Every attempt is recorded: relay, send and answer times, code and
// bytes.
//
// Each fault kind is one entry of the faults table (faults.go): its name,
// its weight in the draw, whether it needs PostgreSQL, and what it does.

// Three faults are drawn per schedule rather than per event. On
// PostgreSQL, one schedule in five runs on a synchronous pair of its own
// that fails over once (the relays on a multi-host URL with
// target_session_attrs=read-write), and two in five on a server whose
// clock is 10 minutes ahead or behind (libfaketime), which must change
// nothing. One schedule in two settles early: about one business
// transaction in fifty is held by the core (memo SLOW, 0.85 s, within the
// relay's 1 s timeout) while resolve --guid settles it with no age, as an
// operator with too short a window would; the lookup gets 404, the row
// becomes FAILED/E902, and the relay must record the core's late 200 over
// it. Those transactions have one attempt, no twin and no replay, and in
// those schedules reprocess runs only after quiesce: any other send in
// that window posts twice, which no relay can prevent once the operator
// settled too early. A relay may be SIGKILLed meanwhile, before the call's
// answer or before its write: the row then stays FAILED/E902 though
// posted, and reprocess, which looks a row up before resending it, must
// settle it DONE/0000 rather than post it again. On a loaded machine the
// relay may also give up on such a call (E901 after its whole timeout)
// before the core answers; reprocess settles that row the same way. Should
// such a GUID (its early settle missed its window: the relay's E901 after
// its whole timeout and before the posting, then the early lookup's 404
// settling the row FAILED, as its history shows) be posted twice, it is
// exempt from the two checks that second posting breaks, and counted in
// the schedule's line and the summary.
//
// After the traffic the run is quiesced (channels done, faults disarmed, no
// request in flight at the core), then the unknown tail (tail.go) leaves
// four young UNKNOWN/E901 rows, two of them posted, whatever the traffic
// left; the relays are stopped by SIGTERM and the ledger settled:
// a resolve pass whose lookups the core answers about another GUID (a
// legal fault: a correct resolve leaves those rows alone), one reprocess
// run, which must leave every UNKNOWN row alone, then resolve until no row is SENT or UNKNOWN and a pass changes
// nothing. ledger audit must then find every history chain (SPEC 6b)
// intact.
//
// # The model the checker holds the history to
//
// Per GUID, with the core's truth log as ground truth (checks.go lists them,
// one table entry each):
//
//   - posted at most once: the core posted the GUID zero or one times;
//   - an answer 0000 carries the response body built from that one
//     posting's answer; B2xx or E500 is answered only for a GUID never
//     posted;
//   - no E902 for an attempt whose request reached the core: a POST of the
//     GUID that arrived at the core while the attempt was in flight, when
//     no other attempt of the GUID and no reprocess run could have sent it
//     (an attempt never answered may reach the core at any later time),
//     contradicts E902;
//   - E904 exactly for a body other than the one the ledger holds: such a
//     body is never answered as processed (it may get E902, which sends
//     nothing: a relay that cannot read its ledger, or refuses a frame
//     before it claims, says so), and the core only ever received the
//     ledger's body;
//   - no lookup while the core still handles a POST of the GUID: settling
//     waits (--settle-min-age and resolve --min-age 4 s, --stale-sent 7 s,
//     by the database's clock) longer than the core ever takes here
//     (1.8 s), so a lookup that overtakes a posting measured an age wrong.
//     A GUID of the early-settle fault is exempt: there the lookup
//     overtakes the POST on purpose;
//   - after settling, the row agrees with the core: DONE/0000 if and only if
//     posted (with the posting's body), otherwise DONE with a refusal or
//     FAILED/E902; none is SENT or UNKNOWN; a GUID without a row was never
//     posted and never answered as processed.
//   - the row's history (SPEC 6b, Ledger.History) accounts for every
//     transition: in time order its entries chain from no row to the
//     settled row, each entry's before the previous one's after, attempts
//     never going down and ending at the row's;
//   - a row leaves UNKNOWN for FAILED only on the core's word: each such
//     change in its history needs a lookup of the GUID the core answered
//     404 (a row whose result is unknown is never taken as not sent
//     without asking, whether or not the core had posted it);
//   - a relay settles a row only once it is old enough by the database's
//     clock: a settling change in the history comes at least
//     --settle-min-age (UNKNOWN) or --stale-sent (SENT) after the row's
//     previous change, both stamped by that clock, whatever other clock
//     the settling read;
//   - every history entry is a change its actor (the entry's command) may
//     make: its before and after are a line of the transition table
//     (transitions.go), derived from SPEC 5–7: claim, re-claim, the
//     call's outcome, the late answer, the unconfirmed claim made FAILED,
//     settling (the relay's and resolve's), reprocess's lookup and
//     re-claim, purge, copy. Each other entry is a violation of its own:
//     reprocess taking an UNKNOWN row is one, whether or not its lookup
//     saved the transfer from a second posting;
//   - a relay that answered 0000 for a call settled early recorded that
//     late answer over FAILED: unless that relay was SIGKILLed since the
//     attempt was sent, nobody else (reprocess, from its lookup) took the
//     row from FAILED to DONE/0000; that makes the row right, not the
//     relay.
//
// A violation names the check, the GUID, the schedule's seed and the events
// that show it; the GUID's whole history is written as an HTML page into
// the output directory.
package verify
