package main

import (
	"flag"
	"fmt"
	"time"

	"lhrelay/internal/batch"
	"lhrelay/internal/cliflag"
	"lhrelay/internal/settle"
)

// settleOptions are the flags of the relay's own settling (SPEC §5.11):
// resolve's rules, run in the background.
type settleOptions struct {
	every, minAge, staleSent time.Duration
	trustLookup404           bool
}

func (so *settleOptions) addFlags(fs *flag.FlagSet) {
	cliflag.SecondsVar(fs, &so.every, "settle-every", settle.DefaultEvery, "`seconds` between the relay's settling rounds, which settle UNKNOWN and orphaned SENT rows by resolve's rules (never resending anything); 0 turns settling off")
	cliflag.SecondsVar(fs, &so.minAge, "settle-min-age", settle.DefaultMinAge, "`seconds` an UNKNOWN row must be old before settling looks it up (the core may still be posting a younger one), as resolve --min-age")
	cliflag.SecondsVar(fs, &so.staleSent, "stale-sent", settle.DefaultStaleSent, "`seconds` after which settling takes a SENT row for orphaned by a relay that died mid-call, as resolve --stale-sent; 0: leave SENT rows to resolve")
	fs.BoolVar(&so.trustLookup404, batch.TrustNotFoundFlag, false, batch.TrustNotFoundUsage+", as resolve --"+batch.TrustNotFoundFlag)
}

// check refuses a --stale-sent within --timeout: a SENT row that young may
// be this relay's own call still under way, and looking it up could settle
// it while the core is still posting it.
func (so *settleOptions) check(timeout time.Duration) error {
	if so.every > 0 && so.staleSent > 0 && so.staleSent <= timeout+stopMargin {
		return fmt.Errorf("--stale-sent %ss: must be more than --timeout plus %ss (%ss), or a call still under way could be settled", cliflag.FormatSeconds(so.staleSent), cliflag.FormatSeconds(stopMargin), cliflag.FormatSeconds(timeout+stopMargin))
	}
	return nil
}

// config is the settler these flags describe (Every 0: none); the
// assembly gives it its ledger, core client and breaker.
func (so *settleOptions) config() settle.Config {
	return settle.Config{Every: so.every, MinAge: so.minAge, StaleSent: so.staleSent, TrustLookup404: so.trustLookup404}
}
