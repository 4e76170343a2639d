package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/cliflag"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/plant"
	"lhrelay/internal/testkit"
	"lhrelay/internal/verify"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestConfigSources: a setting from the command line, its LHRELAY_
// variable or a --config file, in that order of precedence; a bad value
// names its source in a one-line error.
func TestConfigSources(t *testing.T) {
	testkit.CheckSources(t, testkit.ParsedBy(testkit.Sources{
		Flag: "schedules", Default: "20", FromFile: "5", FromEnv: "6", FromArgs: "7",
		BadFlag: "duration", BadValue: "long",
	}, parseArgs, func(o options) string { return strconv.Itoa(o.schedules) }))
}

func TestVersion(t *testing.T) { testkit.CheckVersion(t, cliflag.Version("verify"), parseArgs) }

// TestBadArguments: each is one line on stderr and exit 2, before anything
// is built or started.
func TestBadArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--store", "oracle"}, `--store "oracle"`},
		{[]string{"--plant", "nonsense"}, `--plant "nonsense": want one of reprocess-unknown`},
		{[]string{"--plant", "reprocess-unknown,nonsense"}, `--plant "nonsense": want one of reprocess-unknown`},
		{[]string{"--schedules", "0"}, "--schedules 0"},
		{[]string{"--relays", "0"}, "--relays 0"},
		{[]string{"--first", "-1"}, "--first -1"},
		{[]string{"--rate", "0"}, "--rate 0"},
		{[]string{"--parallel", "0"}, "--parallel 0"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			assert.Equal(t, run(t.Context(), tc.args, &stdout, &stderr), 2)
			assert.Check(t, is.Contains(stderr.String(), tc.want))
			assert.Check(t, strings.HasPrefix(stderr.String(), "verify: "), stderr.String())
			assert.Check(t, is.Equal(strings.Count(stderr.String(), "\n"), 1), stderr.String())
			assert.Check(t, is.Equal(stdout.String(), ""))
		})
	}
}

// TestPlantLists: --plant takes one name, several separated by commas
// (each once), or all.
func TestPlantLists(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want []plant.Name
	}{
		{"forget-late-200", []plant.Name{plant.ForgetLate200}},
		{"forget-late-200,reprocess-unknown,forget-late-200", []plant.Name{plant.ForgetLate200, plant.ReprocessUnknown}},
		{"all", plant.All},
	} {
		o, err := parseArgs([]string{"--plant", tc.arg}, io.Discard)
		assert.NilError(t, err)
		assert.Check(t, is.DeepEqual(o.plants, tc.want), tc.arg)
	}
	o, err := parseArgs(nil, io.Discard)
	assert.NilError(t, err)
	assert.Check(t, is.Len(o.plants, 0))
}

// TestListPlants: --list-plants names every planted mistake, for .ci/run.
func TestListPlants(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, run(t.Context(), []string{"--list-plants"}, &stdout, &stderr), 0)
	var want []string
	for _, n := range plant.All {
		want = append(want, string(n))
	}
	assert.Check(t, is.Equal(stdout.String(), strings.Join(want, "\n")+"\n"))
	assert.Check(t, is.Equal(stderr.String(), ""))
}

// tiny is a verify run of a few transactions a schedule: enough to start
// and stop every process and settle, in a second or two.
var tiny = []string{"--duration", "0.5", "--rate", "20"}

var scheduleLine = regexp.MustCompile(`(?m)^(\S+)\s+(sqlite|postgres)\s+schedule\s+(\d+) seed (\d+):`)

// runParallel runs verify with args and checks that it exits 0 and prints
// one "ok" line per schedule of want, in that order, each of whose
// histories is in its own directory of --out.
func runParallel(t *testing.T, out string, want []string, args ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the commands; skipped with -short")
	}
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), append(append(args, tiny...), "--out", out), &stdout, &stderr)
	assert.Equal(t, code, 0, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	var got []string
	for _, m := range scheduleLine.FindAllStringSubmatch(stdout.String(), -1) {
		assert.Check(t, is.Equal(m[1], "ok"), stdout.String())
		got = append(got, m[2]+"-"+m[4]+"-"+fmt.Sprintf("%04s", m[3]))
	}
	assert.DeepEqual(t, got, want)
	for _, dir := range want {
		_, err := os.Stat(filepath.Join(out, dir, "attempts.jsonl"))
		assert.Check(t, err, dir)
	}
	assert.Check(t, is.Contains(stdout.String(), "every history checks"))
	return stdout.String()
}

// TestParallel: schedules run at once on SQLite each have their own
// processes, ports and ledger; every one checks, and the lines come in
// schedule order whichever ends first.
func TestParallel(t *testing.T) {
	out := runParallel(t, t.TempDir(), []string{"sqlite-3-0000", "sqlite-3-0001", "sqlite-3-0002", "sqlite-3-0003"},
		"--schedules", "4", "--seed", "3", "--parallel", "3")
	assert.Check(t, is.Contains(out, ", 3 at once,"))
}

// TestParallelPostgres: on PostgreSQL each worker has a server of its own
// (a schedule restarts its server, or shifts its clock, which another
// schedule must not see), and a failover schedule its own pair: two
// schedules at once, one of them failing over and one on a shifted
// clock, both check.
func TestParallelPostgres(t *testing.T) {
	pgtest.AdminURL(t)                  // skips without PostgreSQL (fails under LHRELAY_REQUIRE_POSTGRES=1)
	pgtest.FakeClock(t, 10*time.Minute) // skips without libfaketime (likewise)
	cfg := &verify.Config{Relays: 2, Duration: 500 * time.Millisecond, Rate: 20}
	seed := uint64(1)
	for ; ; seed++ {
		a, b := cfg.NewSchedule(seed, 0, verify.StorePostgres), cfg.NewSchedule(seed, 1, verify.StorePostgres)
		if (a.Failover && b.ClockShift != 0) || (b.Failover && a.ClockShift != 0) {
			break
		}
	}
	s := strconv.FormatUint(seed, 10)
	before := ownServers(t)
	out := runParallel(t, t.TempDir(), []string{"postgres-" + s + "-0000", "postgres-" + s + "-0001"},
		"--schedules", "2", "--seed", s, "--store", "postgres", "--parallel", "2")
	assert.Check(t, is.Contains(out, ", failover"))
	assert.Check(t, is.Contains(out, ", database clock "))
	assert.DeepEqual(t, ownServers(t), before) // every server the run started is stopped and removed
}

// ownServers lists the throwaway PostgreSQL servers this process owns
// (pgtest writes the owner's pid beside each one's data).
func ownServers(t *testing.T) []string {
	t.Helper()
	owners, err := filepath.Glob(filepath.Join(os.TempDir(), "lhrelay-pgtest-*", "owner.pid"))
	assert.NilError(t, err)
	var mine []string
	for _, f := range owners {
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(os.Getpid()) {
			mine = append(mine, filepath.Dir(f))
		}
	}
	return mine
}
