// Package plant holds the switches that re-introduce known mistakes into the
// relay and the batch commands, so that cmd/verify can show its checker
// catches them. A production build carries none: without the build tag
// verifybugs, On is a constant false and the compiler drops every planted
// branch. With the tag, the one mistake named by the environment variable
// LHRELAY_PLANT (read once, at the first call) is switched on.
//
// Each mistake is named by a constant below; every place that plants one
// says which, and nothing else in the tree reads these names.
package plant

// Name names one planted mistake.
type Name string

// The mistakes, each a way a relay has been known to post a transfer twice or
// to report a wrong outcome.
const (
	// ReprocessUnknown: reprocess also resends UNKNOWN rows, whose request
	// may have been posted.
	ReprocessUnknown Name = "reprocess-unknown"
	// ReprocessReclaimUnknown: reprocess also selects UNKNOWN rows, looks
	// each up before the resend as it does a FAILED one, and re-claims
	// one the lookup did not find posted UNKNOWN → SENT and resends it.
	// The lookup saves it whenever the core has finished the POST; a
	// core that posts after the relay's timeout and after the lookup
	// posts it twice.
	ReprocessReclaimUnknown Name = "reprocess-reclaim-unknown"
	// ClaimSelectInsert: the claim reads the row, then writes one if it saw
	// none, so two requests of one GUID at once both own it.
	ClaimSelectInsert Name = "claim-select-insert"
	// ReadTimeoutE902: a call that timed out waiting for the answer is
	// answered E902 (never sent) instead of E901.
	ReadTimeoutE902 Name = "read-timeout-e902"
	// LookupOtherGUID: settling accepts a lookup's 200 that is about another
	// GUID.
	LookupOtherGUID Name = "lookup-other-guid"
	// SettleClockAhead: settling (resolve, and the relay's own) measures
	// ages by the process's clock, running 10 minutes ahead, instead of
	// the database's.
	SettleClockAhead Name = "settle-clock-ahead"
	// ForgetLate200: the core's answer to a call whose row was settled
	// FAILED while it was under way (a lookup that came too early) is not
	// recorded: the row stays FAILED/E902 though the core posted it.
	ForgetLate200 Name = "forget-late-200"
)

// All lists the planted mistakes, for cmd/verify's --plant and its CI run.
var All = []Name{ReprocessUnknown, ReprocessReclaimUnknown, ClaimSelectInsert, ReadTimeoutE902, LookupOtherGUID, SettleClockAhead, ForgetLate200}

// EnvVar names the environment variable a verifybugs build reads.
const EnvVar = "LHRELAY_PLANT"
