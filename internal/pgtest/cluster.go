package pgtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options shape a server of a test's own (NewServer, NewPair).
type Options struct {
	// Env is added to the environment of the server's processes, e.g.
	// FakeClock's.
	Env []string
	// Conf holds extra server settings, "name=value".
	Conf []string
	// StandbyVia (NewPair only), when set, is given the primary's
	// host:port and returns the address the standby streams from
	// instead: a proxy's, so that a test can cut replication (the
	// standby then lags).
	StandbyVia func(primary string) string
}

// Server is a PostgreSQL server a test owns (NewServer, NewPair): unlike
// the shared one of URL, it may be killed, promoted, or started with a
// clock of its own. It is stopped and removed when the test ends.
type Server struct{ s *server }

// NewServer starts a server of t's own (initdb, pg_ctl start) and stops and
// removes it when t ends. With LHRELAY_TEST_POSTGRES set, or without the
// binaries, t skips (fails under LHRELAY_REQUIRE_POSTGRES=1): these tests
// need servers they can start.
func NewServer(t testing.TB, o Options) *Server {
	t.Helper()
	srv, err := newServer(t, ownBin(t), o)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// Cleaner registers what to undo at the end: a testing.TB, or a program's
// Cleanups.
type Cleaner interface{ Cleanup(func()) }

// newServer starts a server of c's own and registers its removal with c.
func newServer(c Cleaner, bin string, o Options) (*Server, error) {
	s, err := startOwned(&server{bin: bin, owned: true, env: o.Env, conf: o.Conf}, true)
	if err != nil {
		return nil, err
	}
	srv := &Server{s}
	c.Cleanup(srv.destroy)
	return srv, nil
}

// ownBin is the binaries' directory for a server of the test's own.
func ownBin(t testing.TB) string {
	t.Helper()
	if os.Getenv(EnvURL) != "" {
		t.Skipf("needs PostgreSQL servers the tests start (%s names one server)", EnvURL)
	}
	bin := findBin()
	if bin == "" {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s=1, but: %s", EnvRequire, missing)
		}
		t.Skip(missing)
	}
	return bin
}

// destroy stops the server at once (it may already be dead) and removes
// its files.
func (v *Server) destroy() {
	v.s.run("pg_ctl", "-D", v.s.data(), "-m", "immediate", "-w", "stop")
	v.s.remove()
}

// Addr is the server's host:port.
func (v *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(v.s.port)) }

// Port is the server's port (on 127.0.0.1).
func (v *Server) Port() int { return v.s.port }

// AdminURL is the URL of the server's maintenance database, as the
// superuser.
func (v *Server) AdminURL() string { return v.s.base }

// URL returns the URL of a fresh, empty schema on the server.
func (v *Server) URL(t testing.TB) string {
	t.Helper()
	return withParam(v.s.base, "search_path", newSchema(t, v.s.base))
}

// newSchema creates a schema of its own for t on the server at admin.
func newSchema(t testing.TB, admin string) string {
	t.Helper()
	name, err := createSchema(admin)
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// createSchema creates a schema of its own on the server at admin.
func createSchema(admin string) (string, error) {
	name := fmt.Sprintf("t%d_%d", os.Getpid(), schemas.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("pgtest: connect %s: %w", admin, err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return "", fmt.Errorf("pgtest: create schema: %w", err)
	}
	return name, nil
}

// Connect connects to url, trying again until ctx ends: right after a
// promotion or a restart a server may still turn connections away (or
// close them during the startup exchange), as any client of a failover
// sees, and a test's own query should wait that out rather than fail.
func Connect(ctx context.Context, url string) (*pgx.Conn, error) {
	for {
		c, err := pgx.Connect(ctx, url)
		if err == nil || ctx.Err() != nil {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(50 * time.Millisecond): // a server coming up has no signal to wait on
		}
	}
}

// Exec runs statements on the server at url (for a test's ALTER SYSTEM,
// reads of pg_stat_replication, …), failing t on error.
func Exec(t testing.TB, url, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Connect(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: connect %s: %v", url, err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// PID is the postmaster's process id.
func (v *Server) PID(t testing.TB) int {
	t.Helper()
	pid, err := v.pid()
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func (v *Server) pid() (int, error) {
	b, err := os.ReadFile(filepath.Join(v.s.data(), "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("pgtest: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("pgtest: postmaster.pid: %w", err)
	}
	return pid, nil
}

// Kill kills the postmaster with SIGKILL, as a host that dies does, and
// returns once its port accepts no connection. Its backends notice and end
// on their own; no shutdown checkpoint is written.
func (v *Server) Kill(t testing.TB) {
	t.Helper()
	if err := v.kill(); err != nil {
		t.Fatal(err)
	}
}

func (v *Server) kill() error {
	pid, err := v.pid()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("pgtest: kill %d: %w", pid, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", v.Addr(), time.Second)
		if err != nil {
			return nil
		}
		c.Close()
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: %s still accepts connections after SIGKILL", v.Addr())
		}
		time.Sleep(10 * time.Millisecond) // polling a port the kernel frees by itself
	}
}

// Promote makes a standby the primary (pg_ctl promote, waiting until it
// accepts writes).
func (v *Server) Promote(t testing.TB) {
	t.Helper()
	if err := v.promote(); err != nil {
		t.Fatal(err)
	}
}

func (v *Server) promote() error {
	if out, err := v.s.run("pg_ctl", "-D", v.s.data(), "-w", "-t", "60", "promote"); err != nil {
		return fmt.Errorf("pgtest: pg_ctl promote: %w\n%s", err, out)
	}
	return nil
}

// Pair is a primary streaming to one standby made with pg_basebackup -R.
type Pair struct {
	Primary, Standby *Server
	schema           string
}

// NewPair starts a primary and a standby streaming from it, synchronously
// (synchronous_standby_names = '*': a commit returns once the standby has
// it) or not, and returns once the standby streams (and, if sync, is the
// synchronous one). Both are removed when t ends.
func NewPair(t testing.TB, sync bool, o Options) *Pair {
	t.Helper()
	p, err := newPair(t, ownBin(t), sync, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newPair starts a pair of c's own and registers its removal with c.
func newPair(c Cleaner, bin string, sync bool, o Options) (*Pair, error) {
	conf := append([]string{"wal_level=replica", "max_wal_senders=5", "wal_keep_size=64MB", "hot_standby=on"}, o.Conf...)
	if sync {
		conf = append(conf, "synchronous_standby_names='*'")
	}
	primary, err := newServer(c, bin, Options{Env: o.Env, Conf: conf})
	if err != nil {
		return nil, err
	}
	from := primary.Addr()
	if o.StandbyVia != nil {
		from = o.StandbyVia(from)
	}
	standby, err := newStandby(c, bin, from, o)
	if err != nil {
		return nil, err
	}
	p := &Pair{Primary: primary, Standby: standby}
	want := "async"
	if sync {
		want = "sync"
	}
	if err := waitStreaming(primary.AdminURL(), want); err != nil {
		return nil, err
	}
	if p.schema, err = createSchema(primary.AdminURL()); err != nil {
		return nil, err
	}
	return p, nil
}

// NewStandby starts a standby of v made as NewPair's is (pg_basebackup -R),
// with v's settings, and returns once v streams to it, asynchronously
// unless v's synchronous_standby_names says otherwise. v needs wal_level
// replica or logical (replica is the default) and two free WAL senders.
// It is removed when t ends.
func (v *Server) NewStandby(t testing.TB) *Server {
	t.Helper()
	// The primary's settings: a standby refuses to run with fewer WAL
	// senders (and other slots) than its primary.
	standby, err := newStandby(t, v.s.bin, v.Addr(), Options{Env: v.s.env, Conf: v.s.conf})
	if err != nil {
		t.Fatal(err)
	}
	if err := waitStreaming(v.AdminURL(), ""); err != nil {
		t.Fatal(err)
	}
	return standby
}

// newStandby makes a standby streaming from the primary at from
// (pg_basebackup -R, then pg_ctl start) and registers its removal with c.
func newStandby(c Cleaner, bin, from string, o Options) (*Server, error) {
	st := &server{bin: bin, owned: true, env: o.Env, conf: o.Conf}
	if _, err := startOwned(st, false); err != nil {
		return nil, err
	}
	standby := &Server{st}
	c.Cleanup(standby.destroy)
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	st.port = port
	st.base = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", port)
	host, fromPort, err := net.SplitHostPort(from)
	if err != nil {
		return nil, fmt.Errorf("pgtest: standby source %q: %w", from, err)
	}
	if out, err := st.run("pg_basebackup", "-h", host, "-p", fromPort, "-U", "postgres",
		"-D", st.data(), "-R", "-X", "stream", "--no-sync", "-c", "fast"); err != nil {
		return nil, fmt.Errorf("pgtest: pg_basebackup: %w\n%s", err, out)
	}
	if err := st.startServer(); err != nil {
		return nil, err
	}
	return standby, nil
}

// waitStreaming waits until the primary at url streams to a standby (a
// WAL sender of a walreceiver, the application name a standby gives by
// default) in sync_state want ("" for any).
func waitStreaming(url, want string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer c.Close(context.Background())
	for {
		var n int
		err := c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication
WHERE application_name = 'walreceiver' AND state = 'streaming' AND $1 IN ('', sync_state)`, want).Scan(&n)
		if err != nil {
			return fmt.Errorf("pgtest: waiting for the standby: %w", err)
		}
		if n == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: the standby does not stream (%s) after 60 s", cmp.Or(want, "in any mode"))
		case <-time.After(20 * time.Millisecond): // polling the server's view
		}
	}
}

// URL is the pair's multi-host URL, primary first, with
// target_session_attrs=read-write (a connection goes to whichever is the
// primary) and search_path set to the pair's schema (made on the primary,
// replicated to the standby).
func (p *Pair) URL() string {
	return fmt.Sprintf("postgres://postgres@%s,%s/postgres?target_session_attrs=read-write&search_path=%s",
		p.Primary.Addr(), p.Standby.Addr(), p.schema)
}

// Failover kills the primary (SIGKILL of the postmaster) and promotes the
// standby.
func (p *Pair) Failover(t testing.TB) {
	t.Helper()
	if err := p.failover(); err != nil {
		t.Fatal(err)
	}
}

func (p *Pair) failover() error {
	if err := p.Primary.kill(); err != nil {
		return err
	}
	return p.Standby.promote()
}

// FakeClock is the environment that runs a server's processes under
// libfaketime (Debian's faketime package) with their clock shifted by
// offset: a database whose clock differs from the test process's. (A Go
// binary reads the time through the vDSO, which libfaketime does not
// reach, so the database is the one shifted.) It skips t without the
// library (fails under LHRELAY_REQUIRE_POSTGRES=1).
func FakeClock(t testing.TB, offset time.Duration) []string {
	t.Helper()
	env, err := fakeClock(offset)
	if errors.Is(err, errNoFaketime) {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s=1, but: %v", EnvRequire, err)
		}
		t.Skip(err)
	}
	return env
}

var errNoFaketime = errors.New("libfaketime not found: install the faketime package (apt-get install faketime)")

func fakeClock(offset time.Duration) ([]string, error) {
	libs, _ := filepath.Glob("/usr/lib/*/faketime/libfaketime.so.1")
	if len(libs) == 0 {
		return nil, errNoFaketime
	}
	return []string{
		"LD_PRELOAD=" + libs[0],
		fmt.Sprintf("FAKETIME=%+d", int64(offset/time.Second)),
		// Timeouts and waits inside the server keep the real pace.
		"FAKETIME_DONT_FAKE_MONOTONIC=1",
	}, nil
}

// PauseReplication stops a standby's WAL receiver (SIGSTOP): the
// primary's stream to it is held, and a commit that waits for it as the
// synchronous standby waits until resume (SIGCONT) is called, or until the
// wait is cancelled.
func (v *Server) PauseReplication(t testing.TB) (resume func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, v.AdminURL())
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer c.Close(ctx)
	var pid int
	if err := c.QueryRow(ctx, `SELECT pid FROM pg_stat_wal_receiver`).Scan(&pid); err != nil {
		t.Fatalf("pgtest: the standby's WAL receiver: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("pgtest: SIGSTOP %d: %v", pid, err)
	}
	var once sync.Once
	resume = func() { once.Do(func() { syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(resume)
	return resume
}
