package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/peterbourgon/ff/v3"
)

// EnvPrefix starts the environment variable of every flag of every command:
// --core is LHRELAY_CORE, --connect-timeout LHRELAY_CONNECT_TIMEOUT.
const EnvPrefix = "LHRELAY"

// The flags Read adds to every command.
const (
	configFlag  = "config"
	versionFlag = "version"
)

// Standard reports whether name is a flag that Read adds to every command,
// so a command that names flags after data (lhsend's body fields) can avoid
// them.
func Standard(name string) bool { return name == configFlag || name == versionFlag }

// EnvVar is the environment variable that sets flag name: EnvPrefix, an
// underscore, and the name in upper case with '-' and '.' as '_' (the
// mapping ff applies).
func EnvVar(name string) string {
	return EnvPrefix + "_" + strings.NewReplacer("-", "_", ".", "_", "/", "_").Replace(strings.ToUpper(name))
}

// Usage says where a command's help and version go and what they say.
type Usage struct {
	// Out receives -h and --version.
	Out io.Writer
	// Text is printed before the flags on -h.
	Text string
	// DashFlag, when not empty, names a bool flag that a lone "-" among the
	// arguments stands for (lhsend reads its requests from standard input
	// on "-"); flags may follow it.
	DashFlag string
}

// Read reads a command's settings from three sources, each filling only
// what the ones before it left unset: the command line, then each flag's
// environment variable (EnvVar; an empty one counts as unset), then the
// file named by --config (or LHRELAY_CONFIG), read by ff's plain parser:
// one "flag value" per line, a flag name alone for true, # comments. One
// file and one environment may serve every command of a host: a key or
// LHRELAY_ variable that is another lhrelay command's flag is left to it,
// and one that is no command's flag is an error naming it, not silence. Read adds
// --config and --version to fs, and the variable's name to each flag's
// help text.
//
// It returns the positional arguments. On -h it prints u.Text and the flags
// and returns flag.ErrHelp; on --version it prints the build's version
// (Version) and returns an error that errors.Is flag.ErrHelp too: both mean
// "done, exit 0". A bad value names its source: "invalid value … for flag
// -timeout", "LHRELAY_TIMEOUT: …" or "config file relay.conf: timeout: …".
func Read(fs *flag.FlagSet, args []string, u Usage) ([]string, error) {
	if fs.Lookup(configFlag) == nil {
		fs.String(configFlag, "", "read settings from `file`: one \"flag value\" per line, # comments; the command line and LHRELAY_ variables win over it")
	}
	if fs.Lookup(versionFlag) == nil {
		fs.Bool(versionFlag, false, "print the version (module version, VCS revision) and exit")
	}
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != versionFlag {
			f.Usage += " [$" + EnvVar(f.Name) + "]"
		}
	})

	positional, err := parseCommandLine(fs, args, u.DashFlag)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(u.Out, u.Text)
			fs.SetOutput(u.Out)
			fs.PrintDefaults()
			fs.SetOutput(io.Discard)
		}
		return nil, err
	}
	if fs.Lookup(versionFlag).Value.String() == "true" {
		fmt.Fprintln(u.Out, Version(fs.Name()))
		return nil, errVersion
	}

	if err := checkEnviron(fs, environ()); err != nil {
		return nil, err
	}
	// ff sets every flag still unset from its variable, then from the file.
	// Each source is read in a pass of its own so that a bad value's error
	// names the source (ff's own wording names the flag, not the file).
	err = readSource(fs, EnvVar, func() error {
		return ff.Parse(fs, nil, ff.WithEnvVarPrefix(EnvPrefix))
	})
	if err != nil {
		return nil, err
	}
	path := fs.Lookup(configFlag).Value.String()
	if path == "" {
		return positional, nil
	}
	where := "config file " + path
	shared := false // readable by group or others
	if st, err := os.Stat(path); err == nil {
		shared = st.Mode().Perm()&0o077 != 0
	}
	err = readSource(fs, func(name string) string { return where + ": " + name }, func() error {
		return ff.Parse(fs, nil, ff.WithConfigFile(path), ff.WithConfigFileParser(knownKeys(fs, where, shared)))
	})
	if err != nil {
		if !strings.HasPrefix(err.Error(), where) { // opening it failed
			err = fmt.Errorf("%s: %w", where, err)
		}
		return nil, err
	}
	return positional, nil
}

// errVersion is returned after --version was printed. It is a flag.ErrHelp
// to the callers: information was asked for and printed, exit 0.
var errVersion = versionShown{}

type versionShown struct{}

func (versionShown) Error() string        { return "version printed" }
func (versionShown) Is(target error) bool { return target == flag.ErrHelp }

// parseCommandLine parses args, reading a lone "-" as --dashFlag when
// dashFlag is set, and returns the positional arguments.
func parseCommandLine(fs *flag.FlagSet, args []string, dashFlag string) ([]string, error) {
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if dashFlag == "" || fs.NArg() == 0 || fs.Arg(0) != "-" {
			return fs.Args(), nil
		}
		if err := fs.Set(dashFlag, "true"); err != nil {
			return nil, err
		}
		args = fs.Args()[1:]
	}
}

// readSource runs read, which sets flags with fs.Set, and turns the first
// value refused into "SOURCE: the value's error", source(name) naming where
// that flag's value came from. --version is taken from the command line
// only: a stray variable must not turn a daemon into a version printer.
func readSource(fs *flag.FlagSet, source func(name string) string, read func() error) error {
	var first error
	saved := map[*flag.Flag]flag.Value{}
	fs.VisitAll(func(f *flag.Flag) {
		saved[f] = f.Value
		f.Value = &sourced{Value: f.Value, name: f.Name, source: source, first: &first}
	})
	defer func() {
		for f, v := range saved {
			f.Value = v
		}
	}()
	if err := read(); err != nil {
		if first != nil {
			return first
		}
		return err
	}
	return nil
}

// sourced wraps a flag's value while one source is read, to remember the
// first value it refused and where it came from.
type sourced struct {
	flag.Value
	name   string
	source func(name string) string
	first  *error
}

func (s *sourced) Set(v string) error {
	var err error
	if s.name == versionFlag {
		err = errors.New("--version is read from the command line only")
	} else {
		err = s.Value.Set(v)
	}
	if err != nil && *s.first == nil {
		*s.first = fmt.Errorf("%s: %w", s.source(s.name), err)
	}
	return err
}

// knownKeys is ff's plain parser refusing keys that are not flags of fs
// (ff would say so too, in words that do not name the file), and --config
// itself: one file does not name another.
//
// A file readable by group or others (shared) may not hold a password:
// libpq's rule for its password file, applied to ours.
func knownKeys(fs *flag.FlagSet, where string, shared bool) ff.ConfigFileParser {
	return func(r io.Reader, set func(name, value string) error) error {
		return ff.PlainParser(r, func(name, value string) error {
			switch {
			case name == configFlag:
				return fmt.Errorf("%s: %s: a config file cannot name another", where, name)
			case fs.Lookup(name) == nil && flagOwner(name) != "":
				return nil // another command's setting, in a file shared by a host's commands
			case fs.Lookup(name) == nil:
				return fmt.Errorf("%s: unknown key %q (no lhrelay command has a --%s flag)", where, name, name)
			case shared && holdsPassword(value):
				return fmt.Errorf("%s: %s holds a password and the file is readable by group or others: chmod 0600 it (or put the password in a PGPASSFILE)", where, name)
			}
			return set(name, value)
		})
	}
}

// holdsPassword reports whether a setting's value carries a password: a
// URL with one in its user:password@ part, or a password= parameter.
func holdsPassword(value string) bool {
	if strings.Contains(strings.ToLower(value), "password=") {
		return true
	}
	_, rest, ok := strings.Cut(value, "://")
	if !ok {
		return false
	}
	// The user information ends at the first '@' before any '/'.
	i := strings.IndexAny(rest, "@/")
	return i >= 0 && rest[i] == '@' && strings.Contains(rest[:i], ":")
}
