package cliflag

import (
	"flag"
	"fmt"
	"io"
)

// Parse reads a server command's settings with Read: on -h it prints
// usageText and the flags to usage, on --version the version, and returns
// an error that errors.Is flag.ErrHelp. Positional arguments are refused,
// since every setting is a named flag.
func Parse(fs *flag.FlagSet, args []string, usage io.Writer, usageText string) error {
	positional, err := Read(fs, args, Usage{Out: usage, Text: usageText})
	if err != nil {
		return err
	}
	if len(positional) > 0 {
		return fmt.Errorf("unexpected argument %q", positional[0])
	}
	return nil
}
