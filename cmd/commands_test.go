package cmd_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/cliflag"
)

// built builds every command once into a directory of its own.
func built(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator), "lhrelay/cmd/...")
	out, err := cmd.CombinedOutput()
	assert.NilError(t, err, string(out))
	return dir
}

// result is what one run of a command left.
type result struct {
	code           int
	stdout, stderr string
}

// runCommand runs a built command with env added to a clean environment,
// bounded so that a command that starts instead of refusing fails the test
// rather than hanging it (the context kills it by its PID).
func runCommand(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return result{0, stdout.String(), stderr.String()}
	case errors.As(err, &exit) && ctx.Err() == nil:
		return result{exit.ExitCode(), stdout.String(), stderr.String()}
	}
	t.Fatalf("%s %q: %v (stderr %q)", filepath.Base(bin), args, err, stderr.String())
	return result{}
}

// badCase is a bad setting: the command must exit 2 with one line on
// standard error that names want (the flag, variable or file).
type badCase struct {
	name string
	env  []string
	args []string
	want string
}

// TestBadSettingsExit2 runs every command with bad settings from each
// source and at start-up (a port in use, a ledger in a missing directory,
// an unreachable PostgreSQL): exit 2, one line naming the source.
func TestBadSettingsExit2(t *testing.T) {
	bin := built(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing", "relay.db")
	badFile := filepath.Join(dir, "bad.conf")
	assert.NilError(t, os.WriteFile(badFile, []byte("timout 3\n"), 0o600))
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer taken.Close()
	port := strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)
	unreachablePG := "postgres://u@127.0.0.1:1/x?connect_timeout=1"

	// base is what each command needs to get as far as reading its
	// settings (ledger: its list subcommand).
	base := map[string][]string{
		"relay": {"--port", "0", "--db", filepath.Join(dir, "relay.db")}, "resolve": {}, "reprocess": {}, "purge": {},
		"ledger": {"list"}, "lhsend": {}, "coresim": {"--port", "0"}, "sandbox": {"--relay", "127.0.0.1:0", "--core-listen", "127.0.0.1:0"}, "demo": {}, "verify": {"--out", filepath.Join(dir, "verify")},
	}
	own := map[string][]badCase{
		"relay": {
			{"port in use", nil, []string{"--port", port}, "--port " + port},
			{"db in a missing directory", nil, []string{"--db", missing}, "--db"},
			{"unreachable postgres", nil, []string{"--db", unreachablePG}, "--db"},
			{"connect timeout over timeout", nil, []string{"--timeout", "5", "--connect-timeout", "9"}, "--connect-timeout"},
			{"bad variable value", []string{"LHRELAY_TIMEOUT=soon"}, nil, "LHRELAY_TIMEOUT"},
		},
		"resolve": {
			{"no db", nil, nil, "--db"},
			{"no min-age", nil, []string{"--db", missing, "--core", "http://127.0.0.1:1"}, "--min-age"},
			{"db in a missing directory", nil, []string{"--db", missing, "--core", "http://127.0.0.1:1", "--min-age", "60"}, "--db"},
			{"unreachable postgres", nil, []string{"--db", unreachablePG, "--core", "http://127.0.0.1:1", "--min-age", "60"}, "--db"},
		},
		"reprocess": {
			{"max-attempts 1", nil, []string{"--db", missing, "--core", "http://127.0.0.1:1", "--max-attempts", "1"}, "--max-attempts"},
			{"no core", nil, []string{"--db", missing, "--max-attempts", "3"}, "--core"},
		},
		"purge": {
			{"days 0", nil, []string{"--db", missing, "--days", "0"}, "--days"},
			{"db in a missing directory", nil, []string{"--db", missing, "--days", "30"}, "--db"},
		},
		"ledger": {
			{"no db", nil, nil, "--db"},
			{"bad state", nil, []string{"--db", missing, "--state", "LOST"}, "--state"},
			{"db in a missing directory", nil, []string{"--db", missing}, "--db"},
		},
		"lhsend": {
			{"bad answer timeout", nil, []string{"--answer-timeout", "soon"}, "-answer-timeout"},
		},
		"coresim": {
			{"port in use", nil, []string{"--port", port}, "--listen/--port"},
			{"missing accounts file", nil, []string{"--accounts", filepath.Join(dir, "none.csv")}, "--accounts"},
		},
		"sandbox": {
			{"relay port in use", nil, []string{"--relay", "127.0.0.1:" + port}, "--relay"},
			{"db in a missing directory", nil, []string{"--db", missing}, "--db"},
		},
		"demo": {
			{"unknown flag", nil, []string{"--bogus"}, "-bogus"},
		},
		"verify": {
			{"bad duration", nil, []string{"--duration", "soon"}, "-duration"},
		},
	}
	for _, name := range cliflag.Commands() {
		cases := append([]badCase{
			{"misspelt variable", []string{"LHRELAY_TIMOUT=3"}, nil, "LHRELAY_TIMOUT"},
			{"unknown config key", nil, []string{"--config", badFile}, "config file " + badFile},
			{"unknown config key from LHRELAY_CONFIG", []string{"LHRELAY_CONFIG=" + badFile}, nil, "config file " + badFile},
		}, own[name]...)
		for _, tc := range cases {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				args := append(slices.Clone(base[name]), tc.args...)
				r := runCommand(t, filepath.Join(bin, name), tc.env, args...)
				assert.Equal(t, r.code, 2, "stdout %q stderr %q", r.stdout, r.stderr)
				lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
				assert.Equal(t, len(lines), 1, "one line: %q", r.stderr)
				assert.Assert(t, strings.HasPrefix(lines[0], name+": "), lines[0])
				assert.Assert(t, strings.Contains(lines[0], tc.want), "%q does not name %q", lines[0], tc.want)
			})
		}
	}
}

// TestCommandFlagsListed holds cliflag's list of every command's flags,
// which lets one config file and one environment serve a host, to the
// flags each command shows in -h. And since one LHRELAY_ variable or file
// key sets a flag of that name in every command that has one, a flag
// shared by several commands takes the same form (the placeholder -h
// shows: LHRELAY_CORE is a URL wherever it is read, LHRELAY_TIMEOUT a core
// call's seconds), but for sameForm's exceptions.
func TestCommandFlagsListed(t *testing.T) {
	bin := built(t)
	flagLine := regexp.MustCompile(`(?m)^  -([a-z0-9.-]+)(?:[ \t]([^ \t\n]+))?`)
	// form[flag][placeholder] lists the commands showing it so.
	form := map[string]map[string][]string{}
	for _, name := range cliflag.Commands() {
		helps := [][]string{{"-h"}}
		if name == "ledger" {
			helps = [][]string{{"show", "-h"}, {"list", "-h"}, {"stats", "-h"}, {"backup", "-h"}, {"copy", "-h"}, {"serve", "-h"}}
		}
		var shown []string
		for _, h := range helps {
			r := runCommand(t, filepath.Join(bin, name), nil, h...)
			assert.Equal(t, r.code, 0, "%s %q: %s", name, h, r.stderr)
			for _, m := range flagLine.FindAllStringSubmatch(r.stdout, -1) {
				if !cliflag.Standard(m[1]) && !slices.Contains(shown, m[1]) {
					shown = append(shown, m[1])
					placeholder := m[2]
					if strings.HasPrefix(m[0], "  -"+m[1]+"\t") {
						placeholder = "" // a bool: its help follows on the same line
					}
					if form[m[1]] == nil {
						form[m[1]] = map[string][]string{}
					}
					form[m[1]][placeholder] = append(form[m[1]][placeholder], name)
				}
			}
		}
		slices.Sort(shown)
		listed := slices.Sorted(slices.Values(cliflag.CommandFlags(name)))
		assert.DeepEqual(t, shown, listed)
	}
	// Flags whose form differs on purpose, each a per-run choice no host's
	// file or environment sets.
	sameForm := map[string]string{
		"guid": "lhsend sends one GUID; resolve settles a list",
		"rate": "lhsend's frames a second; verify's business transactions a second, each of several frames",
	}
	for f, forms := range form {
		if _, ok := sameForm[f]; ok {
			assert.Assert(t, len(forms) > 1, "--%s has one form now: drop it from sameForm", f)
			continue
		}
		assert.Equal(t, len(forms), 1, "--%s takes several forms, by command: %v", f, forms)
	}
}
