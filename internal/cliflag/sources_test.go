package cliflag

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/testkit"
)

// testFlags is a small command: a duration, a string and a bool.
func testFlags() (*flag.FlagSet, *time.Duration, *string, *bool) {
	fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var timeout time.Duration
	SecondsVar(fs, &timeout, "timeout", 5*time.Second, "a `duration`")
	core := fs.String("core-url", "http://a", "a string")
	json := fs.Bool("json", false, "a bool")
	return fs, &timeout, core, json
}

func TestReadPrecedence(t *testing.T) {
	for _, tc := range testkit.PrecedenceCases("timeout", "5", "2", "3", "4") {
		t.Run(tc.Name, func(t *testing.T) {
			fs, timeout, _, _ := testFlags()
			args, _ := tc.Apply(t)
			_, err := Read(fs, args, Usage{Out: io.Discard})
			assert.NilError(t, err)
			assert.Equal(t, FormatSeconds(*timeout), tc.Want)
		})
	}
	// A hyphenated flag maps to an underscored variable.
	for _, tc := range testkit.PrecedenceCases("core-url", "http://a", "http://file", "http://env", "http://arg") {
		t.Run("core-url "+tc.Name, func(t *testing.T) {
			fs, _, core, _ := testFlags()
			args, _ := tc.Apply(t)
			_, err := Read(fs, args, Usage{Out: io.Discard})
			assert.NilError(t, err)
			assert.Equal(t, *core, tc.Want)
		})
	}
}

func TestReadBadSources(t *testing.T) {
	for _, tc := range testkit.BadSourceCases("timeout", "soon") {
		t.Run(tc.Name, func(t *testing.T) {
			fs, _, _, _ := testFlags()
			args, file := tc.Apply(t)
			_, err := Read(fs, args, Usage{Out: io.Discard})
			assert.ErrorContains(t, err, tc.WantError(file))
			assert.Assert(t, !strings.Contains(err.Error(), "\n"), "one line: %q", err)
		})
	}
}

func TestReadMessagesNameTheSource(t *testing.T) {
	t.Setenv("LHRELAY_TIMEOUT", "soon")
	fs, _, _, _ := testFlags()
	_, err := Read(fs, nil, Usage{Out: io.Discard})
	assert.Error(t, err, `LHRELAY_TIMEOUT: invalid duration "soon": want seconds, e.g. 1.5, or a Go duration, e.g. 500ms`)

	file := writeConfig(t, "timeout -1")
	t.Setenv("LHRELAY_TIMEOUT", "")
	fs, _, _, _ = testFlags()
	_, err = Read(fs, []string{"--config", file}, Usage{Out: io.Discard})
	assert.Error(t, err, "config file "+file+`: timeout: negative duration "-1": want seconds >= 0`)
}

func TestReadFileForms(t *testing.T) {
	file := writeConfig(t, "# settings", "json", "core-url http://x # the core", "  timeout   1.5  ")
	fs, timeout, core, json := testFlags()
	_, err := Read(fs, []string{"--config", file}, Usage{Out: io.Discard})
	assert.NilError(t, err)
	assert.Equal(t, *json, true, "a name alone is true")
	assert.Equal(t, *core, "http://x", "a trailing comment is not the value")
	assert.Equal(t, *timeout, 1500*time.Millisecond)
}

func TestReadConfigFromEnv(t *testing.T) {
	t.Setenv("LHRELAY_CONFIG", writeConfig(t, "timeout 7"))
	fs, timeout, _, _ := testFlags()
	_, err := Read(fs, nil, Usage{Out: io.Discard})
	assert.NilError(t, err)
	assert.Equal(t, *timeout, 7*time.Second)
}

func TestReadRefusals(t *testing.T) {
	fs, _, _, _ := testFlags()
	_, err := Read(fs, []string{"--config", writeConfig(t, "config other.conf")}, Usage{Out: io.Discard})
	assert.ErrorContains(t, err, "a config file cannot name another")

	t.Setenv("LHRELAY_VERSION", "true")
	fs, _, _, _ = testFlags()
	_, err = Read(fs, nil, Usage{Out: io.Discard})
	assert.ErrorContains(t, err, "LHRELAY_VERSION: --version is read from the command line only")
}

func TestReadPositionalAndDash(t *testing.T) {
	fs, _, _, json := testFlags()
	rest, err := Read(fs, []string{"--timeout", "1", "-", "--json", "x"}, Usage{Out: io.Discard, DashFlag: "json"})
	assert.NilError(t, err)
	assert.Equal(t, *json, true)
	assert.DeepEqual(t, rest, []string{"x"})

	fs, _, _, json = testFlags()
	rest, err = Read(fs, []string{"a", "-"}, Usage{Out: io.Discard})
	assert.NilError(t, err)
	assert.Equal(t, *json, false, "no DashFlag: - is an argument")
	assert.DeepEqual(t, rest, []string{"a", "-"})
}

func TestReadHelpListsVariables(t *testing.T) {
	var out bytes.Buffer
	fs, _, _, _ := testFlags()
	_, err := Read(fs, []string{"-h"}, Usage{Out: &out, Text: "usage: cmd\n"})
	assert.Assert(t, errors.Is(err, flag.ErrHelp))
	for _, want := range []string{"usage: cmd\n", "[$LHRELAY_TIMEOUT]", "[$LHRELAY_CORE_URL]", "[$LHRELAY_JSON]", "[$LHRELAY_CONFIG]", "-version"} {
		assert.Assert(t, strings.Contains(out.String(), want), "missing %q in\n%s", want, out.String())
	}
	assert.Assert(t, !strings.Contains(out.String(), "LHRELAY_VERSION"), out.String())
}

func TestReadVersion(t *testing.T) {
	var out bytes.Buffer
	fs, _, _, _ := testFlags()
	_, err := Read(fs, []string{"--version"}, Usage{Out: &out})
	assert.Assert(t, errors.Is(err, flag.ErrHelp), "exit 0 like -h: %v", err)
	assert.Assert(t, strings.HasPrefix(out.String(), "cmd: "), out.String())
}

func TestFormatVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "lhrelay", Version: "(devel)"}}
	assert.Equal(t, formatVersion("relay", bi), "relay: lhrelay (devel), revision unknown (built without VCS information, e.g. -buildvcs=false), go1.26.8")
	bi.Settings = []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}
	assert.Equal(t, formatVersion("relay", bi), "relay: lhrelay (devel), revision abc123 (2026-01-02T03:04:05Z), modified, go1.26.8")
	bi.Settings[2].Value = "false"
	bi.Main.Version = "v1.2.0"
	assert.Equal(t, formatVersion("relay", bi), "relay: lhrelay v1.2.0, revision abc123 (2026-01-02T03:04:05Z), go1.26.8")
}

func writeConfig(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "x.conf")
	assert.NilError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	return path
}

// TestConfigFileWithPasswordMustBePrivate: a config file readable by group
// or others that holds a password is refused, naming the file and the key;
// the same file 0600, or one without a password, is read.
func TestConfigFileWithPasswordMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		testkit.WriteFile(t, p, []byte(text))
		assert.NilError(t, os.Chmod(p, mode))
		return p
	}
	for _, tc := range []struct {
		text string
		mode os.FileMode
		want string // "" : read
	}{
		{"core-url postgres://u:S3cr3t@db/x\n", 0o644, "core-url holds a password and the file is readable by group or others"},
		{"core-url postgres://db/x?user=u&password=S3cr3t\n", 0o640, "core-url holds a password"},
		{"core-url postgres://u:S3cr3t@db/x\n", 0o600, ""},
		{"core-url postgres://u@db/x\n", 0o644, ""},
		{"core-url http://core:8080/a:b@c\n", 0o644, ""},
	} {
		p := write("c.conf", tc.text, tc.mode)
		fs, _, _, _ := testFlags()
		_, err := Read(fs, []string{"--config", p}, Usage{Out: io.Discard})
		if tc.want == "" {
			assert.NilError(t, err, tc.text)
			continue
		}
		assert.ErrorContains(t, err, "config file "+p+": "+tc.want)
		assert.Assert(t, !strings.Contains(err.Error(), "S3cr3t"), err.Error())
	}
}

// One environment serves every command of a host: another command's
// variable is left to it, a variable no command reads is refused by name.
func TestReadEnvironmentOfAHost(t *testing.T) {
	t.Setenv("LHRELAY_MIN_AGE", "60") // resolve's; this command has no --min-age
	fs, timeout, _, _ := testFlags()
	_, err := Read(fs, nil, Usage{Out: io.Discard})
	assert.NilError(t, err)
	assert.Equal(t, *timeout, 5*time.Second)

	t.Setenv("LHRELAY_TIMOUT", "3")
	fs, _, _, _ = testFlags()
	_, err = Read(fs, nil, Usage{Out: io.Discard})
	assert.ErrorContains(t, err, "LHRELAY_TIMOUT: no lhrelay command has a flag it would set")
}

// One config file serves every command of a host: another command's key
// is left to it, a key no command has is refused naming the file.
func TestReadConfigOfAHost(t *testing.T) {
	fs, timeout, _, _ := testFlags()
	_, err := Read(fs, []string{"--config", writeConfig(t, "port 9200\nmin-age 60\ntimeout 3")}, Usage{Out: io.Discard})
	assert.NilError(t, err)
	assert.Equal(t, *timeout, 3*time.Second)

	file := writeConfig(t, "port 9200\ntimout 3")
	fs, _, _, _ = testFlags()
	_, err = Read(fs, []string{"--config", file}, Usage{Out: io.Discard})
	assert.ErrorContains(t, err, "config file "+file+`: unknown key "timout" (no lhrelay command has a --timout flag)`)
}
