package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"lhrelay/internal/app"
	"lhrelay/internal/cliflag"
	"lhrelay/internal/ledger"
)

// runCopy is "ledger copy --from SRC --to DST": every row of SRC into DST
// as it is, with SRC's history and an entry per row copied. DST is created (a file) or given its tables (a database) when
// new. It prints one line of counts, and each conflicting GUID.
func runCopy(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("ledger copy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	from := fs.String("from", "", "the ledger to copy: SQLite `file` or postgres:// URL (required)")
	to := fs.String("to", "", "the ledger to copy into, a SQLite `file` or postgres:// URL, created if missing (required)")
	allowAsync := fs.Bool("allow-async-replication", false, "copy into a PostgreSQL primary whose standbys replicate asynchronously (synchronous_standby_names empty), accepting that a failover may forget copied rows")
	rest, err := cliflag.Read(fs, args, cliflag.Usage{Out: out, Text: usage + "\n\nflags of copy:\n"})
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return app.Badf("copy: %w", err)
	}
	if len(rest) > 0 {
		return app.Badf("copy: unexpected argument %q", rest[0])
	}
	if *from == "" || *to == "" {
		return app.Badf("copy: --from and --to are required")
	}
	if *from == *to {
		return app.Badf("copy: --from and --to name the same ledger")
	}
	src, err := ledger.OpenExisting(*from)
	if err != nil {
		return app.Bad(fmt.Errorf("copy: --from: %w", err))
	}
	defer src.Close()
	dst, err := ledger.Open(*to, ledger.WithActor(ledger.NewActor("ledger copy")))
	if err != nil {
		return app.Bad(fmt.Errorf("copy: --to: %w", err))
	}
	defer dst.Close()
	// A ledger written to must survive a failover (SPEC 6a).
	if err := dst.CheckReplication(ctx, *allowAsync); err != nil {
		return app.Bad(fmt.Errorf("copy: --to: %w", err))
	}

	c, err := ledger.Copy(ctx, src, dst)
	fmt.Fprintf(out, "copy: read=%d copied=%d present=%d conflicts=%d history=%d\n", c.Read, c.Copied, c.Present, len(c.Conflicts), c.History)
	for _, g := range c.Conflicts {
		fmt.Fprintf(out, "conflict %s: %s holds it with other content; left as it is\n", g, dst.Path())
	}
	if err != nil {
		return app.Bad(err)
	}
	if len(c.Conflicts) > 0 {
		return fmt.Errorf("copy: %d rows of %s conflict with %s and were not copied", len(c.Conflicts), src.Path(), dst.Path())
	}
	return nil
}
