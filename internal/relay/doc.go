// Package relay serves LH-STD channels over TCP (SPEC §1, §5): it reads
// request frames, turns each valid one into exactly one core call
// (internal/corecall), records it in the ledger (SPEC §6) and answers with
// one standard response code.
//
// # A frame's way through
//
// Each connection has its own goroutine and reads one frame at a time; a
// frame is answered before the next is read. handleFrame runs validate →
// claim → call → record → answer, in that order:
//
//   - validate: LEN ≥ MinFrameLen, printable bytes only, a header that
//     decodes with FLAG S, a registered TX_CODE (else E101), a body that
//     decodes and builds a core call (else E102). E101 and E102 touch neither
//     the ledger nor the core.
//   - admit (Config.Limiter, package admit): a slot among the core calls
//     in flight, within a bounded wait; a frame not admitted is shed
//     (Overload, below) and goes no further.
//   - claim (when a ledger is configured): Owned goes on to the call;
//     Replay answers the stored response byte for byte; InProgress E903;
//     Unknown E901; Reused E904 — none of them calls the core.
//   - call: corecall.Client.Send, exactly once.
//   - record: the ledger row moves to the outcome's state with the code and
//     the exact response frame (outcome.OfCall builds both). An answer that
//     settling the row would reach too (outcome.AnswerBeforeRecord: E901,
//     E902, and 0000 of a transaction settled by a lookup) is answered at
//     once while the commit is on its way (Ledger.FinishLater): if the
//     relay dies before it lands, the row stays SENT and resolve
//     --stale-sent settles it to the same answer (the policy below), so the
//     channel loses nothing but a millisecond of waiting. Any other answer
//     (a refusal or core error, B201–B203 or E500; a 0000 of a read, which
//     is settled as never posted) is answered only once it is on disk. A
//     retry of the same GUID is queued to the ledger behind the outcome,
//     so it finds the outcome (a replay), never E903.
//   - answer: the frame is written with a write deadline of FrameTimeout.
//
// # Policies an operator should know
//
// Ledger unusable at claim time (a full disk, a read-only or unreachable
// database): the frame is answered from its row as read, without a write
// (Ledger.Peek): a DONE row is replayed, a SENT row is E903, an UNKNOWN row
// E901, a different request E904, exactly as a claim would answer; only a
// GUID that needs a claim (no row, or a FAILED row) is answered E902.
// Nothing was sent to the core, so "safe to resend with the same GUID" is
// true; the claim either committed nothing or (if the database reported a
// failed commit that had in fact landed) left a SENT row that a resend sees
// as E903 until resolve --stale-sent settles it by inquiry (package ledger
// reasons this through for PostgreSQL). When the read fails too, the
// answer is E902.
//
// A claim whose commit was not confirmed (the answer to its COMMIT was
// lost, or its wait for the synchronous standby was cancelled:
// ledger.UnconfirmedClaimError) is answered E902 without a read: its row,
// if it landed, is this request's own. The relay remembers it and, once
// the database answers, makes that row FAILED/E902 if it is still SENT
// with the claim's attempts and token (abandon.go: a fresh claim of a GUID
// whose first claim never landed has the same attempts, and its call may be
// under way), so that the channel's resend is
// served instead of E903 until settling. It looks for up to two minutes,
// since a COMMIT still under way on the server shows its row only once
// done; past that, or if the relay stops, resolve --stale-sent settles the
// row by inquiry.
//
// Overload (SPEC §5.12, Config.Limiter): the calls in flight to the core
// are bounded by a limit adapted to the core's latency (package admit).
// Admission sits before the claim: a frame that gets no slot within the
// bounded wait, or whose call the core's recent latency says cannot finish
// within the timeout, is shed — answered from its row as read, like a
// claim that could not be written: a replay, E903, E901 or E904 as usual,
// and E902 for a GUID that needs a claim. So a shed frame costs one read
// and no commit, and writes nothing: a new GUID leaves no row (E902 is
// true: nothing was sent), a FAILED row stays FAILED/E902 for reprocess,
// with its attempts unchanged. The other order — claim, then shed and
// record FAILED/E902 — would cost two group-committed writes per shed
// frame, when under overload most frames are shed. Frames that need no core
// call are never refused: a replay that finds no slot is still replayed.
// The slot is held from before the claim to the end of the core call (not
// the recording of its outcome), and given back with what the call showed
// of the core's latency.
//
// A late answer: the core's answer to a call whose row was settled
// FAILED/E902 while the call was under way (a lookup that came too early)
// is recorded over it, since it is the truth; if the row was re-claimed
// since, it is left alone and the relay logs "ledger conflict" at error
// level (lhrelay_ledger_conflicts_total counts it): the transfer may have
// been posted twice. If it was settled DONE meanwhile from a lookup that
// found this posting (reprocess looks a FAILED row up before resending
// it) and not re-claimed, it already holds what a 200 would record: the
// relay says so at info level. The channel's answer is the one already
// given.
//
// A POST's 200 whose guid is missing or another's proves nothing about
// this transfer: E901 (corecall), settled by lookup.
//
// Ledger unusable when recording: the row stays SENT and the error is
// logged with the GUID; resolve --stale-sent later settles the row by its
// transaction's own rule (the layout's lookup line): a posted request is
// found by its lookup (DONE 0000), one that was not is 404 (FAILED E902,
// which reprocess sends again); a read declared "lookup none" is settled
// FAILED E902 without asking. The channel gets the true outcome when that
// settlement will agree with it (outcome.AnswerBeforeRecord). A refusal or
// core error (B201–B203, E500) would not be agreed with — the lookup finds
// nothing, and reprocess would resend what the channel was told was
// refused — and neither would a read's 0000; such an answer is E901
// instead: the result is for settlement, and settlement will tell the
// truth.
//
// MaxConns: a connection accepted while MaxConns connections are open is
// closed at once, before a single byte is read from it. The channel sees the
// connection close without an answer; since nothing it sent was read,
// nothing was done, and it may resend later with the same GUID. The
// alternative, leaving connections in the kernel's accept backlog, would
// make a channel's frames wait unanswered for an unknown time — the one
// thing a channel cannot tell from a lost request. Rejections are logged at
// most once a second with a running count.
//
// Exhaustion (SPEC 5.7): a slot of MaxConns is worth something only to a
// connection that uses it. A new connection must finish its TLS handshake
// and start its first frame within the shorter of FrameTimeout and
// IdleTimeout, or it is closed; between frames it waits IdleTimeout. One remote address holds at most
// MaxConnsPerAddr connections (by default half of MaxConns: a gateway
// carrying many channels fits, one address alone cannot take every slot);
// one more is closed unread, as a MaxConns refusal. While MaxConns itself
// refuses connections, Ready says so (ErrNoRoom), for a few seconds after the
// last refusal. Every refusal and every failed handshake is
// logged at most once a second with a running count.
//
// Allow-list and TLS: a connection from an address outside Config.Allow is
// closed before a byte is read, like a MaxConns refusal (allow.go). Over
// TLS (Config.TLS) the handshake comes first, bounded by FrameTimeout; a
// handshake that fails (no client certificate, one from another CA, a
// plain-TCP client) closes the connection before a frame is read
// (tls.go). The client certificate's subject is in every frame line.
//
// Breaker (Config.Breaker, breaker.go): after a run of core calls that
// could not connect, or a failure rate (connection failures and timeouts)
// over a window with a minimum number of calls (package breaker), the core
// is not called for a cool-down.
// Frames are answered E902 at once — nothing was sent — and recorded
// FAILED/E902 like any E902, for the channel or reprocess to send again.
// Ready fails while it is open.
//
// Panics: a panic while handling a frame is recovered, logged with its
// stack, answered, and the connection closed (its per-connection state is
// not trusted after a bug). The answer never claims more than is known:
//
//   - before the claim (or with no ledger, before the call started): E902 —
//     nothing was sent;
//   - after an Owned claim, before the call started: the row is finished
//     FAILED/E902 and the answer is E902;
//   - once the call may have started: the row is finished UNKNOWN/E901 and
//     the answer is E901 (settle by inquiry);
//   - after the outcome was recorded: the recorded answer;
//   - after a claim that did not give ownership (replay, in progress,
//     unknown, reused): E903 — the row belongs to someone else and is left
//     alone; the channel retries later and gets the row's own answer.
//
// E500 is never used for a bug: it tells the channel the core refused and
// did not post, which the relay cannot know after a panic.
//
// Shutdown: stop accepting; close connections waiting for their next frame;
// let connections in the middle of a frame finish that frame (read, call,
// record, answer) and then close them; wait until every outcome answered is
// recorded. A frame still arriving has until Config.StopArrival (the
// relay's --timeout), or the context's deadline if sooner, to arrive whole; one that does not was never processed and is dropped with
// its connection (logged with the bytes received), which does not make the
// stop unclean. When the context given to Shutdown
// ends while whole frames are still being handled, their core calls are cancelled — each is then
// classified like any failed call (E902 if nothing was sent, else E901) and
// recorded, so no row is left SENT — and the connections are closed.
//
// # Logs
//
// Every answered frame gets exactly one line, message "frame", written just
// before the answer (so a channel holding its answer finds the line
// written), with these attributes:
//
//	guid, tx       the header's GUID and TX_CODE (for a frame whose header
//	               did not decode, the bytes at their positions)
//	rsp            the response code answered
//	state          the ledger row's state as recorded (DONE, UNKNOWN,
//	               FAILED; SENT if recording failed) or as found (replay,
//	               E903, E904, E901 from an UNKNOWN row); "" when no row
//	               was touched (E101, E102, no ledger). For 0000, E901 and
//	               E902 it is the state being recorded: if that fails, an
//	               error line "ledger: outcome not recorded; row stays
//	               SENT" with the GUID follows
//	attempts       the row's attempts (0 when no row)
//	latency_ms     from the whole frame read to the answer ready, float
//	remote         the channel's address
//	claim          the ledger's verdict (Owned, Replay, InProgress,
//	               Unknown, Reused), when a claim was made
//	status,core_ms the core's HTTP status (0: no answer) and the call's
//	               duration, when the core was called
//	why, len       for E101/E102: the reason and the frame's length
//	err            what went wrong, when something did
//	req            the request fields by JSON key, once the body decoded
//
// The line is at info for the ordinary answers (0000, B20x, E500, a
// replay) and at warn for those worth a look: E101 and E102 (with why),
// E901, E902, E903, E904. Account numbers (fields marked Account in the
// layout) are masked in it, 11********4005, and in its err; so they are in
// every line at info and above. At debug level a "frame received" line
// carries the decoded request, header fields and body unmasked, for tracing
// on a test system.
//
// Other lines: ledger failures and panics at error (always with the GUID;
// a claim the ledger could not write, which a full disk makes every claim,
// at most one line a second with a running count: each frame's own line
// has its GUID and the error),
// frame and idle timeouts, refused connections (max-conns, the per-address
// share, --allow, silent new connections and failed TLS handshakes: at most
// one line a second each), connection opened/closed at debug, and Shutdown's two lines
// ("relay stopping" with the frames in flight, "relay stopped" with how
// many were finished and how long it took).
//
// # Metrics
//
// With Config.Metrics set (internal/metrics), the server counts every
// answered frame by TX_CODE (an unregistered one as "unknown") and response
// code, before the answer is written; observes each core call's duration by
// TX_CODE and outcome; and tracks the frames in flight (first byte read,
// answer not yet ready), the open connections and the connections refused by
// MaxConns and MaxConnsPerAddr. Ready is the readiness probe: it fails
// while the server stops, while MaxConns refuses connections, and when the
// ledger does not answer a Ping (saying only that: the database's error,
// which names its user and host, goes to the log).
//
// Timeouts: a new connection waiting for the first byte of its first frame
// is closed after the shorter of FrameTimeout and IdleTimeout, one waiting
// between frames after IdleTimeout; once that byte has arrived the whole frame must arrive
// within FrameTimeout or the connection is dropped (nothing of a partial
// frame is processed). An answer that cannot be written within FrameTimeout
// (a channel that does not read) drops the connection too.
package relay
