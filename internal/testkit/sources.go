package testkit

import (
	"errors"
	"flag"
	"io"
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

// Sources is one command's test of where its settings come from: the
// precedence of one flag's sources (PrecedenceCases) and the refusal of a
// bad value of another, naming its source (BadSourceCases). Each command
// says only how it parses; CheckSources runs the cases.
type Sources struct {
	// Flag and its values as PrecedenceCases takes them. NoDefault marks a
	// flag without a default (--db): its default case is skipped.
	Flag, Default, FromFile, FromEnv, FromArgs string
	NoDefault                                  bool
	// Base is prepended to every precedence case's arguments.
	Base []string
	// Value parses args as the command does and returns what Flag ended
	// up as, in the form the values above are written in.
	Value func(t *testing.T, args []string) string

	// BadFlag gets BadValue from each source; BadBase is prepended.
	BadFlag, BadValue string
	BadBase           []string
	// Err parses args as the command does and returns its error.
	Err func(t *testing.T, args []string) error
}

// CheckSources runs s's cases as subtests.
func CheckSources(t *testing.T, s Sources) {
	t.Helper()
	for _, tc := range PrecedenceCases(s.Flag, s.Default, s.FromFile, s.FromEnv, s.FromArgs) {
		if s.NoDefault && tc.Name == "default" {
			continue
		}
		t.Run(tc.Name, func(t *testing.T) {
			args, _ := tc.Apply(t, s.Base...)
			if got := s.Value(t, args); got != tc.Want {
				t.Fatalf("--%s is %q, want %q (args %q)", s.Flag, got, tc.Want, args)
			}
		})
	}
	for _, tc := range BadSourceCases(s.BadFlag, s.BadValue) {
		t.Run(tc.Name, func(t *testing.T) {
			args, file := tc.Apply(t, s.BadBase...)
			err := s.Err(t, args)
			switch want := tc.WantError(file); {
			case err == nil:
				t.Fatalf("args %q: no error, want one containing %q", args, want)
			case !strings.Contains(err.Error(), want):
				t.Fatalf("error %q does not contain %q", err, want)
			case strings.Contains(err.Error(), "\n"):
				t.Fatalf("error %q is more than one line", err)
			}
		})
	}
}

// ParsedBy completes s for a command whose flags are parsed by parse (its
// parseArgs) into options O, value reading Flag's value out of them.
func ParsedBy[O any](s Sources, parse func([]string, io.Writer) (O, error), value func(O) string) Sources {
	s.Value = func(t *testing.T, args []string) string {
		t.Helper()
		o, err := parse(args, io.Discard)
		if err != nil {
			t.Fatalf("args %q: %v", args, err)
		}
		return value(o)
	}
	s.Err = func(t *testing.T, args []string) error {
		_, err := parse(args, io.Discard)
		return err
	}
	return s
}

// CheckVersion checks that parse prints want for --version and returns an
// error matching flag.ErrHelp (printed: exit 0).
func CheckVersion[O any](t *testing.T, want string, parse func([]string, io.Writer) (O, error)) {
	t.Helper()
	var out strings.Builder
	_, err := parse([]string{"--version"}, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--version: error %v, want flag.ErrHelp", err)
	}
	if out.String() != want+"\n" {
		t.Fatalf("--version printed %q, want %q", out.String(), want+"\n")
	}
}

// LedgerSources is the settings-sources test of a batch command: --db's
// precedence (it has no default, and the ledgers it names do not exist, so
// every run ends in bad settings after --db was read), and a bad value of
// badFlag naming its source. run runs the command on args and returns the
// --db it read, its exit status and its error; usage is the exit status
// of bad settings. base are the other arguments the command requires.
func LedgerSources(t *testing.T, run func(args []string) (db string, code int, err error), usage int, base []string, badFlag, badValue string) Sources {
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name, "relay.db") }
	parse := func(t *testing.T, args []string) (string, error) {
		t.Helper()
		db, code, err := run(args)
		if code != usage {
			t.Fatalf("%q: exit status %d (%v), want %d", args, code, err, usage)
		}
		return db, err
	}
	return Sources{
		Flag: "db", NoDefault: true, FromFile: path("file"), FromEnv: path("env"), FromArgs: path("arg"),
		Base: base,
		Value: func(t *testing.T, args []string) string {
			db, _ := parse(t, args)
			return db
		},
		BadFlag: badFlag, BadValue: badValue,
		BadBase: append([]string{"--db", path("x")}, base...),
		Err: func(t *testing.T, args []string) error {
			_, err := parse(t, args)
			return err
		},
	}
}
