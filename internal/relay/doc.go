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
//   - claim (when a ledger is configured): Owned goes on to the call;
//     Replay answers the stored response byte for byte; InProgress E903;
//     Unknown E901; Reused E904 — none of them calls the core.
//   - call: corecall.Client.Send, exactly once.
//   - record: the ledger row moves to the outcome's state with the code and
//     the exact response frame, before the channel is answered.
//   - answer: the frame is written with a write deadline of FrameTimeout.
//
// # Policies an operator should know
//
// Ledger unusable at claim time: the frame is answered E902. Nothing was sent
// to the core, so "safe to resend with the same GUID" is true; the claim
// either committed nothing or (if SQLite reported a failed commit that had in
// fact landed) left a SENT row that a resend sees as E903 until resolve
// --stale-sent settles it by inquiry.
//
// Ledger unusable when recording: the channel still gets the true outcome
// (the core's answer is known and the frame is built); the row stays SENT and
// the error is logged with the GUID. resolve --stale-sent settles such rows
// by inquiry (a posted transfer is found, one that was not is 404 → FAILED),
// which agrees with what the channel was told.
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
// record, answer) and then close them. When the context given to Shutdown
// ends first, the remaining core calls are cancelled — each is then
// classified like any failed call (E902 if nothing was sent, else E901) and
// recorded, so no row is left SENT — and the connections are closed.
//
// Timeouts: a connection waiting for the first byte of a frame is closed
// after IdleTimeout; once that byte has arrived the whole frame must arrive
// within FrameTimeout or the connection is dropped (nothing of a partial
// frame is processed). An answer that cannot be written within FrameTimeout
// (a channel that does not read) drops the connection too.
package relay
