package cliflag

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"lhrelay/internal/plant"
)

// commandFlags lists the flags of every lhrelay command (besides --config
// and --version), so that one config file and one environment can serve
// all the commands of a host: a key or LHRELAY_ variable that is some
// other command's flag is left to that command, and one that is no
// command's flag is a mistake (a misspelling, LHRELAY_TIMOUT) refused by
// name. cmd/'s table test checks it against every command's -h.
var commandFlags = map[string][]string{
	"relay": {"admit-wait", "allow", "allow-async-replication", "breaker-cooldown", "breaker-failures", "breaker-min-calls", "breaker-rate", "breaker-window",
		"connect-timeout", "core", "core-ca", "core-cert", "core-key", "db", "fixed-inflight", "frame-timeout", "idle-timeout", "listen", "log-format",
		"log-level", "max-conns", "max-conns-per-addr", "max-inflight", "metrics-addr", "port", "settle-every", "settle-min-age", "stale-sent", "timeout",
		"tls-cert", "tls-client-ca", "tls-client-org", "tls-key", "trust-lookup-404"},
	"resolve":   {"allow-async-replication", "core", "core-ca", "core-cert", "core-key", "db", "guid", "max-inflight", "metrics-file", "min-age", "rate", "stale-sent", "timeout", "trust-lookup-404", "v"},
	"reprocess": {"allow-async-replication", "core", "core-ca", "core-cert", "core-key", "db", "dry-run", "max-attempts", "max-inflight", "metrics-file", "rate", "timeout", "trust-lookup-404", "v"},
	"purge":     {"allow-async-replication", "days", "db", "dry-run", "history-days", "metrics-file", "v"},
	"ledger": {"allow-async-replication", "audit-every", "db", "from", "json", "listen", "max-attempts", "max-rows", "older-than", "refresh", "show-accounts", "stale-sent", "state",
		"tls-cert", "tls-client-ca", "tls-key", "to", "token-file"},
	"lhsend": {"acct", "addr", "amount", "answer-timeout", "bad", "bank", "concurrency", "count", "describe", "dp-acct", "dp-bank", "dst-org", "duplicates", "guid", "json", "memo", "print", "rate", "raw",
		"raw-file", "seed", "src-org", "stdin", "tls-ca", "tls-cert", "tls-key", "tx", "wd-acct", "wd-bank"},
	"coresim": {"accounts", "control", "delay", "limit", "listen", "log", "max-concurrent", "port", "refuse-beyond", "service", "tls-cert", "tls-client-ca", "tls-key", "truth"},
	"sandbox": {"core-listen", "db", "delay", "log-level", "metrics-addr", "relay", "timeout"},
	"demo":    {"json", "keep-db", "verbose"},
	"verify":  {"duration", "first", "list-plants", "out", "parallel", "plant", "rate", "relays", "schedules", "seed", "store"},
}

// otherVariables are LHRELAY_ variables read by something other than a
// command's flags: the planted mistake verify switches on (internal/plant),
// the test suite's PostgreSQL (internal/pgtest's, spelled here because
// a command does not import a test helper) and the console's browser tests
// and page timings (internal/console's tests).
var otherVariables = []string{plant.EnvVar, "LHRELAY_TEST_POSTGRES", "LHRELAY_REQUIRE_POSTGRES",
	"LHRELAY_REQUIRE_BROWSER", "LHRELAY_CONSOLE_SCREENSHOT", "LHRELAY_CONSOLE_BENCH", "LHRELAY_CONSOLE_BENCH_ROWS", "LHRELAY_CONSOLE_BENCH_DB"}

// CommandFlags returns the flags commandFlags lists for command, for the
// test that holds the list to the commands.
func CommandFlags(command string) []string { return commandFlags[command] }

// Commands returns the commands commandFlags knows.
func Commands() []string {
	var out []string
	for c := range commandFlags {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// flagOwner returns a command that has flag name, or "" when none has.
func flagOwner(name string) string {
	if Standard(name) {
		return "every command"
	}
	for _, c := range Commands() {
		if slices.Contains(commandFlags[c], name) {
			return c
		}
	}
	return ""
}

// checkEnviron refuses an LHRELAY_ variable in env that is neither a flag
// of fs or of any command nor one of otherVariables: it was meant to set
// something and sets nothing.
func checkEnviron(fs *flag.FlagSet, env []string) error {
	known := map[string]bool{EnvVar(versionFlag): true}
	fs.VisitAll(func(f *flag.Flag) { known[EnvVar(f.Name)] = true })
	for _, v := range otherVariables {
		known[v] = true
	}
	for _, c := range Commands() {
		for _, f := range append(commandFlags[c], configFlag) {
			known[EnvVar(f)] = true
		}
	}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix+"_") && !known[name] {
			return fmt.Errorf("%s: no lhrelay command has a flag it would set (misspelt?); unset it", name)
		}
	}
	return nil
}

// environ is the process's environment; a variable for tests.
var environ = os.Environ
