package pgtest

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Standalone is the throwaway server for a program that is not a test
// (cmd/verify): started from the installed binaries as for the tests, and
// removed by Close.
type Standalone struct{ s *server }

// StartStandalone starts a throwaway server, or names why there is none.
func StartStandalone() (*Standalone, error) {
	s, err := start()
	if err != nil {
		return nil, err
	}
	return &Standalone{s: s}, nil
}

// StartStandaloneWith starts a throwaway server shaped by o (its Env and
// Conf; e.g. ClockEnv's environment), or names why there is none.
func StartStandaloneWith(o Options) (*Standalone, error) {
	bin, err := programBin()
	if err != nil {
		return nil, err
	}
	s, err := startOwned(&server{bin: bin, owned: true, env: o.Env, conf: o.Conf}, true)
	if err != nil {
		return nil, err
	}
	return &Standalone{s: s}, nil
}

// programBin is the binaries' directory for a program's own servers.
func programBin() (string, error) {
	bin := findBin()
	if bin == "" {
		return "", errMissing
	}
	return bin, nil
}

// StartPair is NewPair for a program: c (a Cleanups) removes both servers.
func StartPair(c Cleaner, sync bool, o Options) (*Pair, error) {
	bin, err := programBin()
	if err != nil {
		return nil, err
	}
	return newPair(c, bin, sync, o)
}

// KillPrimaryAndPromote is Failover for a program.
func (p *Pair) KillPrimaryAndPromote() error { return p.failover() }

// ClockEnv is FakeClock for a program: the environment that shifts a
// server's clock by offset, or why there is none.
func ClockEnv(offset time.Duration) ([]string, error) { return fakeClock(offset) }

// Cleanups is a Cleaner for a program: Run undoes what was registered,
// last first.
type Cleanups struct {
	mu  sync.Mutex
	fns []func()
}

// Cleanup registers f.
func (c *Cleanups) Cleanup(f func()) {
	c.mu.Lock()
	c.fns = append(c.fns, f)
	c.mu.Unlock()
}

// Run runs what was registered, last first, once.
func (c *Cleanups) Run() {
	c.mu.Lock()
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// Schema creates a fresh schema name and returns the URL that uses it.
func (p *Standalone) Schema(ctx context.Context, name string) (string, error) {
	c, err := pgx.Connect(ctx, p.s.base)
	if err != nil {
		return "", fmt.Errorf("pgtest: connect: %w", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgtest: create schema %s: %w", name, err)
	}
	return withParam(p.s.base, "search_path", name), nil
}

// Restart is pg_ctl restart -m fast, as in Restart.
func (p *Standalone) Restart() error {
	s := p.s
	if !s.owned {
		return fmt.Errorf("pgtest: the server named by %s cannot be restarted", EnvURL)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if out, err := s.run("pg_ctl", "-D", s.data(), "-l", filepath.Join(s.dir, "server.log"), "-m", "fast", "-w", "-t", "60", "restart"); err != nil {
		return fmt.Errorf("pg_ctl restart: %w\n%s", err, out)
	}
	return nil
}

// Close stops the server and removes its files.
func (p *Standalone) Close() error {
	err := p.s.stop()
	p.s.remove()
	return err
}
