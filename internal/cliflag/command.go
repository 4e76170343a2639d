package cliflag

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Parse parses args for a server command: on --help it prints usageText and
// the flags to usage (and returns flag.ErrHelp); positional arguments are
// refused, since every setting is a named flag.
func Parse(fs *flag.FlagSet, args []string, usage io.Writer, usageText string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(usage, usageText)
			fs.SetOutput(usage)
			fs.PrintDefaults()
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// SignalContext is cancelled by the first SIGINT or SIGTERM, which starts a
// graceful stop. Default handling is then restored, so that a second signal
// kills a stop that is taking too long.
func SignalContext() context.Context {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	return ctx
}
