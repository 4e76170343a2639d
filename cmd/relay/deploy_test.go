package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
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

	"lhrelay/internal/app/batchcmd"
	"lhrelay/internal/batch"
	"lhrelay/internal/testkit"
)

// deployDir holds what an operations team installs (README, deploy/).
const deployDir = "../../deploy"

// metricName finds the project's series names in a PromQL expression.
var metricName = regexp.MustCompile(`\b(?:lhrelay|promhttp)_[a-z0-9_]+\b`)

// TestDeployNamesExportedMetrics: every series an alert rule or the
// dashboard names is one a running relay exports on /metrics, or one a batch
// command writes to its --metrics-file. A renamed metric fails here.
func TestDeployNamesExportedMetrics(t *testing.T) {
	r := startRun(t, "--timeout", "1", "--metrics-addr", "127.0.0.1:0")
	assert.Assert(t, r.lines.Scan(), "no metrics line; stderr:\n%s", r.stderr.String())
	metricsURL, _ := strings.CutPrefix(r.lines.Text(), "metrics listening on ")
	r.drain()
	sendTransfer(t, r.addr, "00000000000000000000000000de0001") // so that the vectors have a series
	_, body := httpGet(t, metricsURL+"/metrics")
	exported := seriesNames(body)

	// A relay serving TLS exports its certificates' expiry too.
	dir := t.TempDir()
	ca := testkit.NewCA(t, "relay CA")
	cert, key := ca.Server(t, "relay").WriteFiles(t, dir, "relay")
	rt := startRun(t, "--timeout", "1", "--metrics-addr", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key)
	assert.Assert(t, rt.lines.Scan(), "no metrics line; stderr:\n%s", rt.stderr.String())
	tlsMetricsURL, _ := strings.CutPrefix(rt.lines.Text(), "metrics listening on ")
	rt.drain()
	_, body = httpGet(t, tlsMetricsURL+"/metrics")
	for name := range seriesNames(body) {
		exported[name] = true
	}

	file := filepath.Join(t.TempDir(), "resolve.prom")
	assert.NilError(t, batchcmd.WriteMetricsFile(file, batch.NewSummary("resolve", "selected"), 0, time.Now()))
	text, err := os.ReadFile(file)
	assert.NilError(t, err)
	for name := range seriesNames(string(text)) {
		exported[name] = true
	}

	named := map[string]string{} // name → where
	for _, expr := range ruleExprs(t, filepath.Join(deployDir, "prometheus", "lhrelay.rules.yml")) {
		for _, n := range metricName.FindAllString(expr, -1) {
			named[n] = "lhrelay.rules.yml"
		}
	}
	for _, expr := range dashboardExprs(t, filepath.Join(deployDir, "grafana", "lhrelay-dashboard.json")) {
		for _, n := range metricName.FindAllString(expr, -1) {
			named[n] = "lhrelay-dashboard.json"
		}
	}
	assert.Assert(t, len(named) >= 8, "found too few names: %v", named)
	for n, where := range named {
		assert.Assert(t, exported[n], "%s names %s, which nothing exports; exported: %v", where, n, slices.Sorted(mapKeys(exported)))
	}
}

// seriesNames are the names of the samples in a Prometheus text exposition.
func seriesNames(text string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		names[line[:strings.IndexAny(line, "{ ")]] = true
	}
	return names
}

// ruleExprs are the expr values of a rules file, one-line or block ("|").
func ruleExprs(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	assert.NilError(t, err)
	defer f.Close()
	var exprs []string
	in, indent := false, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		lead := len(line) - len(strings.TrimLeft(line, " "))
		switch {
		case strings.HasPrefix(trimmed, "expr:"):
			exprs = append(exprs, strings.TrimPrefix(trimmed, "expr:"))
			in, indent = true, lead
		case in && lead > indent && !strings.HasPrefix(trimmed, "#"):
			exprs[len(exprs)-1] += " " + trimmed
		default:
			in = false
		}
	}
	assert.NilError(t, sc.Err())
	assert.Assert(t, len(exprs) > 0)
	return exprs
}

// dashboardExprs are the queries of a Grafana dashboard's panels and
// template variables.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	assert.NilError(t, err)
	var d struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Query any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	assert.NilError(t, json.Unmarshal(b, &d))
	var exprs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok {
			exprs = append(exprs, q)
		}
	}
	return exprs
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestSystemdUnitVerifies runs systemd-analyze verify on the shipped unit,
// with ExecStart pointing at an executable that exists here: no error and
// no warning (a misspelt hardening option is only a warning).
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed: the unit is not verified")
	}
	unit, err := os.ReadFile(filepath.Join(deployDir, "systemd", "lhrelay.service"))
	assert.NilError(t, err)
	for _, want := range []string{"NoNewPrivileges=yes", "ProtectSystem=strict", "ReadWritePaths=/var/lib/lhrelay", "EnvironmentFile=/etc/lhrelay/relay.env"} {
		assert.Assert(t, strings.Contains(string(unit), "\n"+want+"\n"), "missing %s", want)
	}
	// Every unit shipped (the relay, and the batch commands' services and
	// timers), its binary where the install steps put it.
	self, err := os.Executable()
	assert.NilError(t, err)
	units, err := filepath.Glob(filepath.Join(deployDir, "systemd", "lhrelay*"))
	assert.NilError(t, err)
	assert.Assert(t, len(units) >= 7, "%v: the relay's unit and a service and a timer for each batch command", units)
	dir := t.TempDir()
	installed := regexp.MustCompile(`/usr/local/lib/lhrelay/bin/[a-z]+`)
	var paths []string
	for _, u := range units {
		text, err := os.ReadFile(u)
		assert.NilError(t, err)
		path := filepath.Join(dir, filepath.Base(u))
		assert.NilError(t, os.WriteFile(path, installed.ReplaceAll(text, []byte(self)), 0o644))
		paths = append(paths, path)
	}
	out, err := exec.Command(analyze, append([]string{"verify"}, paths...)...).CombinedOutput()
	assert.NilError(t, err, string(out))
	assert.Equal(t, strings.TrimSpace(string(out)), "", "warnings from systemd-analyze verify")

	// The example environment file sets only variables the relay reads.
	env, err := os.ReadFile(filepath.Join(deployDir, "systemd", "relay.env"))
	assert.NilError(t, err)
	var help strings.Builder
	_, err = parseArgs([]string{"-h"}, &help)
	assert.ErrorIs(t, err, flag.ErrHelp)
	var args []string
	for _, line := range strings.Split(string(env), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		assert.Assert(t, ok, line)
		assert.Assert(t, strings.Contains(help.String(), "[$"+k+"]"), "relay.env: %s is not a variable the relay reads", k)
		t.Setenv(k, v)
		args = append(args, k)
	}
	o, err := parseArgs(nil, os.Stderr)
	assert.NilError(t, err, "relay.env: %v", args)
	assert.Equal(t, o.db, "/var/lib/lhrelay/relay.db")
	assert.Equal(t, o.addr, "127.0.0.1:9200", "the shipped settings expose nothing until the operator chooses how")
}

// TestREADMEInstallSteps runs the README's "Installing the service" steps
// literally, as root, in a private mount namespace: /etc and
// /usr/local/lib are copies there and bin/ a scratch directory, so the
// host is left as it was. Only the lines that need a running systemd
// (systemctl, systemd-analyze security) are left out. Then every unit and
// timer as installed, with the binaries where the steps put them, must
// pass systemd-analyze verify without a word, and the service's user must
// be able to read its settings but not change them.
func TestREADMEInstallSteps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: the install steps are not run")
	}
	for _, tool := range []string{"unshare", "mount", "useradd", "setpriv", "systemd-analyze"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: the install steps are not run", tool)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	assert.NilError(t, err)
	steps := installSteps(t, string(readme))
	root, err := filepath.Abs("../..")
	assert.NilError(t, err)

	tmp := t.TempDir()
	shim := filepath.Join(tmp, "shim")
	assert.NilError(t, os.Mkdir(shim, 0o755))
	// Root already: sudo runs the command as it is.
	assert.NilError(t, os.WriteFile(filepath.Join(shim, "sudo"), []byte("#!/bin/sh\nexec \"$@\"\n"), 0o755))
	_, statErr := os.Stat(filepath.Join(root, "bin"))
	if os.IsNotExist(statErr) {
		assert.NilError(t, os.Mkdir(filepath.Join(root, "bin"), 0o755))
		t.Cleanup(func() { os.Remove(filepath.Join(root, "bin")) })
	}
	script := `set -eu
tmp=$1
cp -a /etc "$tmp/etc" && mount --bind "$tmp/etc" /etc
cp -a /usr/local/lib "$tmp/lib" && mount --bind "$tmp/lib" /usr/local/lib
rm -f /etc/systemd/system/lhrelay*
mount -t tmpfs tmpfs bin
export PATH="$tmp/shim:$PATH"
` + strings.Join(steps, "\n") + `
echo "== installed"
ls /etc/systemd/system/lhrelay* | wc -l
systemd-analyze verify /etc/systemd/system/lhrelay*.service /etc/systemd/system/lhrelay*.timer 2>&1
echo "== verified"
setpriv --reuid=lhrelay --regid=lhrelay --init-groups cat /etc/lhrelay/relay.env >/dev/null
if setpriv --reuid=lhrelay --regid=lhrelay --init-groups sh -c ': >> /etc/lhrelay/relay.env' 2>/dev/null; then echo "the service can change its settings"; exit 1; fi
stat -c '%n %a %U:%G' /etc/lhrelay /etc/lhrelay/relay.env /usr/local/lib/lhrelay/bin /usr/local/lib/lhrelay/bin/relay
`
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", tmp)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	assert.NilError(t, err, string(out))
	text := string(out)
	installed, verified, ok := strings.Cut(text, "== installed\n")
	assert.Assert(t, ok, text)
	t.Logf("install steps run:\n%s\n%s", strings.Join(steps, "\n"), installed)
	shipped, err := filepath.Glob(filepath.Join(deployDir, "systemd", "lhrelay*"))
	assert.NilError(t, err)
	count, verified, _ := strings.Cut(verified, "\n")
	assert.Equal(t, count, strconv.Itoa(len(shipped)), "every unit and timer shipped is installed")
	verify, stats, ok := strings.Cut(verified, "== verified\n")
	assert.Assert(t, ok, text)
	assert.Equal(t, strings.TrimSpace(verify), "", "systemd-analyze verify of the installed units")
	assert.Equal(t, stats, "/etc/lhrelay 750 root:lhrelay\n/etc/lhrelay/relay.env 640 root:lhrelay\n/usr/local/lib/lhrelay/bin 755 root:root\n/usr/local/lib/lhrelay/bin/relay 755 root:root\n")
}

// installSteps are the commands of the README's first code block under
// "### Installing the service", but for those that need a running
// systemd: systemctl and systemd-analyze security. Every unit that
// directory ships must be among the files they install.
func installSteps(t *testing.T, readme string) []string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n### Installing the service\n")
	assert.Assert(t, ok, "README has no section Installing the service")
	var steps []string
	in := false
	for _, line := range strings.Split(section, "\n") {
		cmd, indented := strings.CutPrefix(line, "    ")
		switch {
		case indented && strings.TrimSpace(cmd) != "":
			in = true
			if strings.HasPrefix(cmd, "sudo systemctl ") || strings.HasPrefix(cmd, "systemd-analyze security") {
				continue
			}
			steps = append(steps, cmd)
		case in && line != "":
			return steps
		}
	}
	assert.Assert(t, len(steps) > 0)
	return steps
}
