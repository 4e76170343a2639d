package ledger

import (
	"errors"
	"fmt"
	"time"
)

// State is the state of a ledger row (SPEC sections 4 and 6).
type State string

// The states a row can be in. They match the CHECK constraint in schema.sql.
const (
	// StateReceived is allowed by the schema but not written by this
	// package; a row found in it is treated like SENT (in progress).
	StateReceived State = "RECEIVED"
	// StateSent: the request owns the GUID and may be at the core right now.
	StateSent State = "SENT"
	// StateDone: settled; the stored response is replayed byte for byte.
	StateDone State = "DONE"
	// StateUnknown: sent, result unknown; never resent, settled by inquiry.
	StateUnknown State = "UNKNOWN"
	// StateFailed: definitely not sent; may be re-claimed and sent again.
	StateFailed State = "FAILED"
)

// States lists every state in a fixed order (for Stats and for callers that
// print counts).
var States = []State{StateReceived, StateSent, StateDone, StateUnknown, StateFailed}

// arg is s as a statement's argument: the known states boxed without an
// allocation (a constant in an interface is static data).
func (s State) arg() any {
	switch s {
	case StateReceived:
		return string(StateReceived)
	case StateSent:
		return string(StateSent)
	case StateDone:
		return string(StateDone)
	case StateUnknown:
		return string(StateUnknown)
	case StateFailed:
		return string(StateFailed)
	}
	return string(s)
}

// Valid reports whether s is one of the five states of the schema.
func (s State) Valid() bool {
	switch s {
	case StateReceived, StateSent, StateDone, StateUnknown, StateFailed:
		return true
	}
	return false
}

// ClaimOutcome says what the caller of Claim must do with the request.
type ClaimOutcome int

// The zero ClaimOutcome is deliberately not Owned: a caller that ignores
// Claim's error and looks only at the outcome must never call the core.
const (
	// Owned: this request owns the GUID (new row, or a FAILED row
	// re-claimed); call the core exactly once, then Finish.
	Owned ClaimOutcome = iota + 1
	// Replay: the row is DONE with the same request; answer
	// Claim.Response byte for byte without calling the core.
	Replay
	// InProgress: the row is SENT or RECEIVED (or a FAILED row was taken by
	// someone else first); answer IN_PROGRESS at once, never wait.
	InProgress
	// Unknown: the row is UNKNOWN; answer READ_TIMEOUT, never resend.
	Unknown
	// Reused: the GUID is known with a different TX_CODE or body; answer
	// GUID_REUSED and change nothing.
	Reused
	// NeedsClaim (Peek only): no row, or a FAILED row; only Claim can
	// give the request the GUID. Never call the core on it.
	NeedsClaim
)

func (o ClaimOutcome) String() string {
	switch o {
	case Owned:
		return "Owned"
	case Replay:
		return "Replay"
	case InProgress:
		return "InProgress"
	case Unknown:
		return "Unknown"
	case Reused:
		return "Reused"
	case NeedsClaim:
		return "NeedsClaim"
	}
	return fmt.Sprintf("ClaimOutcome(%d)", int(o))
}

// Request is what Claim needs from a validated request frame. The ledger
// never parses frames: the caller cuts them.
type Request struct {
	GUID   string
	TxCode string
	// Frame is the whole request frame as received (length prefix
	// included); it is stored in tx.request.
	Frame []byte
	// Body is the part of Frame after the fixed-length header; it must be a
	// suffix of Frame. Only TxCode and Body make a request's fingerprint:
	// a retry may carry a new SENT_AT in its header and is still the same
	// request.
	Body []byte
}

// Outcome is what became of a request, as its row records it: the state it
// moves to, the response code, and the response frame as sent (stored
// NULL when nil; a DONE row needs one, since retries replay it). The relay,
// reprocess and resolve build it in one place (package outcome) and hand it
// to Finish, FinishLater or Transition.
type Outcome struct {
	State    State
	RspCode  string
	Response []byte
	// Why is what the row's history entry says about the change; its
	// Reason is required.
	Why Why
}

// Claim is the result of (*Ledger).Claim.
type Claim struct {
	Outcome ClaimOutcome
	// Attempts is the row's attempts after the claim: 1 for a new row, the
	// incremented count for a re-claimed FAILED row, the stored count
	// otherwise.
	Attempts int
	// Response is the stored response frame (Replay only).
	Response []byte
	// State is the state the row was found in; empty when Claim inserted a
	// new row. For Owned after a FAILED row it is StateFailed.
	State State
	// RspCode is the stored rsp_code of the row found (empty for a new row).
	RspCode string
}

// Row is one ledger row as read by Get and List. NULL columns read as zero
// values.
type Row struct {
	GUID      string
	TxCode    string
	State     State
	RspCode   string
	Request   []byte
	Response  []byte
	Attempts  int
	UpdatedAt time.Time // UTC, whole seconds; zero if NULL
	// FirstClaim is the row's hist_key, which its first claim set to the
	// claim's time in microseconds and nothing changes after: 0 for a
	// row that has none (older than schema version 3, or copied). Only
	// Scan with Filter.ByFirstClaim reads it.
	FirstClaim int64
}

// Filter selects rows for List. Zero fields select everything.
type Filter struct {
	// States: any of these states (empty: any state).
	States []State
	// UpdatedBefore: rows with updated_at at or before this instant,
	// compared at whole seconds (the fraction of UpdatedBefore is dropped).
	// So with UpdatedBefore = now - minAge a row exactly minAge old is
	// selected. Zero: any age.
	UpdatedBefore time.Time
	// OlderThan: rows last updated at least this long ago by the
	// database's clock (SQLite: its datetime('now'); PostgreSQL: its
	// CURRENT_TIMESTAMP), the clock that stamped updated_at. Every age a
	// command or the relay selects by is this one, never an instant from
	// the process's clock: hosts' clocks differ (SPEC 6a). Zero: any age.
	OlderThan time.Duration
	// RspCode: rows with exactly this rsp_code (empty: any).
	RspCode string
	// TxCode: rows of exactly this TX_CODE (empty: any).
	TxCode string
	// GUIDs: only the rows of these GUIDs (empty: any).
	GUIDs []string
	// MaxAttempts: when > 0, rows with attempts < MaxAttempts (a row with
	// attempts == MaxAttempts is excluded).
	MaxAttempts int
	// MinAttempts: when > 0, rows with attempts >= MinAttempts (rows that
	// have used up reprocess's --max-attempts).
	MinAttempts int
	// Limit: at most this many rows when > 0.
	Limit int
	// ByFirstClaim orders Scan by the time each row was first claimed
	// (Row.FirstClaim, then guid) instead of by updated_at: the customers
	// who waited longest come first, however often their rows changed
	// since. A row's place in this order never moves, so a scan yields
	// each row once. With one state, UNKNOWN or FAILED, each page is a
	// range of that state's first-claim index (schema.sql).
	ByFirstClaim bool
}

// StateCounts is what Stats reports.
type StateCounts struct {
	Total int64
	// ByState holds every state of States, zero counts included.
	ByState map[State]int64
	// ByCode holds the non-zero (state, rsp_code) counts, ordered by state
	// then rsp_code. A NULL rsp_code counts as "".
	ByCode []CodeCount
	// OldestUnknown is the updated_at of the oldest UNKNOWN row (zero if
	// none): the age an operator alerts on when resolve is not running.
	OldestUnknown time.Time
	// OldestSent is the updated_at of the oldest SENT row (zero if none): a
	// SENT row older than the relay's timeout was orphaned by a crash.
	OldestSent time.Time
	// Now is the database's clock when the counts were read: ages are
	// Now minus an updated_at, never the process's clock minus one (SPEC
	// 6a).
	Now time.Time
}

// CodeCount is the number of rows in one (state, rsp_code) pair.
type CodeCount struct {
	State   State
	RspCode string
	Count   int64
}

var (
	// ErrStateChanged: a conditional transition found the row missing or
	// in another state than the one it expected; nothing was changed. The
	// error is a *StateError; errors.As gives the state found.
	ErrStateChanged = errors.New("row is not in the expected state")
	// ErrReclaimed: an outcome arrived for a claim whose row has been
	// re-claimed since (more attempts): it was settled FAILED while the
	// call was under way, and sent again. Nothing was changed; the
	// transfer may be posted twice, and the caller reports it (SPEC 6).
	// The error is a *StateError and matches ErrStateChanged too.
	ErrReclaimed = errors.New("row re-claimed since this claim")
	// ErrUnconfirmed: a write's COMMIT was sent and its outcome is not
	// known (the answer was lost), or it committed without becoming
	// durable (the wait for the synchronous standby was cancelled). For
	// a claim the error is an *UnconfirmedClaimError.
	ErrUnconfirmed = errors.New("commit not confirmed")
	// ErrNotFound: no row has this GUID.
	ErrNotFound = errors.New("no such row")
	// ErrNotLedger: the file exists but is not a ledger (not SQLite, or no
	// usable tx table, or an unknown schema version).
	ErrNotLedger = errors.New("not a ledger")
	// ErrClosed: the Ledger was closed.
	ErrClosed = errors.New("ledger closed")
)

// StateError is the error of a conditional transition that changed nothing.
// It matches ErrStateChanged, and also ErrNotFound when the row is missing.
type StateError struct {
	GUID  string
	Want  State // the state the transition expected
	Found State // the state found; empty when the row is missing
	// FoundAttempts is the attempts of the row found.
	FoundAttempts int
	// Reclaimed: the row was re-claimed after the claim this transition
	// was for (ErrReclaimed).
	Reclaimed bool
	// Detail names a further condition that failed, e.g. the attempts
	// limit of ReclaimBelow; usually empty.
	Detail string
}

func (e *StateError) Error() string {
	found := "row missing"
	if e.Found != "" {
		found = "found " + string(e.Found)
	}
	if e.Detail != "" {
		found += " (" + e.Detail + ")"
	}
	// No GUID here: every method wraps the error with its operation and GUID.
	return fmt.Sprintf("want %s, %s: %v", e.Want, found, ErrStateChanged)
}

// Unwrap lets errors.Is match ErrStateChanged, and ErrNotFound for a
// missing row.
func (e *StateError) Unwrap() []error {
	if e.Reclaimed {
		return []error{ErrStateChanged, ErrReclaimed}
	}
	if e.Found == "" {
		return []error{ErrStateChanged, ErrNotFound}
	}
	return []error{ErrStateChanged}
}

// UnconfirmedClaimError is the error of a Claim whose commit was not
// confirmed (ErrUnconfirmed): the row may exist, SENT, with Attempts. The
// core must not be called; the caller answers E902 and hands the claim to
// AbandonClaim once the database answers again (SPEC 6).
type UnconfirmedClaimError struct {
	GUID     string
	Attempts int
	Token    string // the claim's own, for AbandonClaim
	Err      error
}

func (e *UnconfirmedClaimError) Error() string {
	return fmt.Sprintf("claim (attempts %d) %v", e.Attempts, e.Err)
}

func (e *UnconfirmedClaimError) Unwrap() error { return e.Err }
