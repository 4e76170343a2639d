package testutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// SourceCase is one way of giving a command its settings: command-line
// arguments, environment variables and a --config file's lines. Tests of
// every command run the same cases (PrecedenceCases, BadSourceCases) through
// their own parsing.
type SourceCase struct {
	Name string
	Args []string
	Env  map[string]string
	File []string // lines of the --config file; none: no file
	// Want is the value the flag must end up with (PrecedenceCases), or a
	// piece of the one-line error (BadSourceCases, where "FILE" stands for
	// the config file's path).
	Want string
}

// Apply sets the case's environment for the rest of the test and writes its
// config file, and returns the command line to parse: base, the case's
// arguments, and --config FILE when it has one.
func (c SourceCase) Apply(t *testing.T, base ...string) (args []string, file string) {
	t.Helper()
	for k, v := range c.Env {
		t.Setenv(k, v)
	}
	args = append(append([]string{}, base...), c.Args...)
	if c.File != nil {
		file = filepath.Join(t.TempDir(), "cmd.conf")
		if err := os.WriteFile(file, []byte(strings.Join(c.File, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", file)
	}
	return args, file
}

// WantError is Want with "FILE" replaced by the config file's path.
func (c SourceCase) WantError(file string) string { return strings.ReplaceAll(c.Want, "FILE", file) }

// envVar mirrors cliflag.EnvVar (kept apart so that a change to the naming
// breaks these tests instead of following it silently).
func envVar(flag string) string {
	return "LHRELAY_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// PrecedenceCases checks flag > environment > file > default for one flag
// of a command, given three different valid values and the default as the
// command prints it.
func PrecedenceCases(flag, def, fileVal, envVal, argVal string) []SourceCase {
	line := flag + " " + fileVal
	env := map[string]string{envVar(flag): envVal}
	return []SourceCase{
		{Name: "default", Want: def},
		{Name: "file", File: []string{"# a comment", "", line}, Want: fileVal},
		{Name: "env", Env: env, Want: envVal},
		{Name: "env over file", Env: env, File: []string{line}, Want: envVal},
		{Name: "flag over env and file", Args: []string{"--" + flag, argVal}, Env: env, File: []string{line}, Want: argVal},
	}
}

// BadSourceCases checks that a bad value names its source, that an unknown
// key in the file is an error, and that a missing file is one.
func BadSourceCases(flag, bad string) []SourceCase {
	return []SourceCase{
		{Name: "bad env", Env: map[string]string{envVar(flag): bad}, Want: envVar(flag) + ": "},
		{Name: "bad file value", File: []string{flag + " " + bad}, Want: "config file FILE: " + flag + ": "},
		{Name: "unknown key", File: []string{"no-such-flag 1"}, Want: `config file FILE: unknown key "no-such-flag"`},
		{Name: "missing file", Args: []string{"--config", "/nonexistent/lhrelay.conf"}, Want: "config file /nonexistent/lhrelay.conf: "},
	}
}
