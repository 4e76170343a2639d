// Package batchtest holds what the batch commands' tests share.
package batchtest

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"lhrelay/internal/batch"
	"lhrelay/internal/testkit"
)

// Sources is the configuration-sources test of the batch command name
// whose work is body: --db's precedence (it has no default, and the ledgers
// it names do not exist, so every run ends in a usage error after --db was
// read), and a bad value of badFlag naming its source. base are the other
// arguments the command requires.
func Sources(t *testing.T, name string, body batch.Body, base []string, badFlag, badValue string) testkit.Sources {
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name, "relay.db") }
	run := func(t *testing.T, args []string) (*batch.Command, error) {
		t.Helper()
		c := batch.NewCommand(name)
		_, err := body(context.Background(), c, args, &bytes.Buffer{})
		if code := batch.ExitCode(err); code != batch.ExitUsage {
			t.Fatalf("%s %q: exit status %d (%v), want %d", name, args, code, err, batch.ExitUsage)
		}
		return c, err
	}
	return testkit.Sources{
		Flag: "db", NoDefault: true, FromFile: path("file"), FromEnv: path("env"), FromArgs: path("arg"),
		Base: base,
		Value: func(t *testing.T, args []string) string {
			c, _ := run(t, args)
			return c.DB
		},
		BadFlag: badFlag, BadValue: badValue,
		BadBase: append([]string{"--db", path("x")}, base...),
		Err: func(t *testing.T, args []string) error {
			_, err := run(t, args)
			return err
		},
	}
}
