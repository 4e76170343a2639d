package pgtest

import (
	"context"
	"fmt"
	"path/filepath"

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
