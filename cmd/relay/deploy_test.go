package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
