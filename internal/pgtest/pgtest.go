// Package pgtest gives tests a real PostgreSQL server: a throwaway one
// started from the installed binaries (initdb and pg_ctl in a temporary
// directory, on a free port of 127.0.0.1, removed at the end), or the one
// named by LHRELAY_TEST_POSTGRES (a postgres:// URL whose user may create
// schemas). Each test gets its own schema (URL), so tests never see each
// other's rows.
//
// A test binary that uses it runs its tests through Main (from TestMain);
// the server starts when the first test asks for it, so a run that selects
// no PostgreSQL test never starts one. A binary that dies without stopping
// its server (killed, or ended by go test's -timeout) leaves it running:
// the next one to start a server stops and removes it. PostgreSQL refuses to run as root:
// then initdb, pg_ctl and the server run as the "postgres" user.
//
// Without binaries (and without LHRELAY_TEST_POSTGRES) the tests that need
// PostgreSQL skip with one line naming the package to install;
// LHRELAY_REQUIRE_POSTGRES=1 (set by .ci/run) makes that a failure.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The environment variables the harness reads.
const (
	EnvURL     = "LHRELAY_TEST_POSTGRES"
	EnvRequire = "LHRELAY_REQUIRE_POSTGRES"
)

const missing = "PostgreSQL tests skipped: no initdb/pg_ctl found (install the postgresql package, e.g. apt-get install postgresql-15, or set " + EnvURL + ")"

var (
	once    sync.Once
	srv     *server
	srvErr  error
	schemas atomic.Uint64
)

// Main runs the tests of m, stops the server they started, if any, and
// exits with their status.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main for a TestMain with cleanups of its own: it returns the
// status instead of exiting.
func Run(m *testing.M) int {
	code := m.Run()
	if srv != nil {
		if err := srv.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
		srv.remove()
	}
	return code
}

// server is the PostgreSQL server of this test binary.
type server struct {
	base  string // URL of its database, without parameters
	owned bool   // started here: it can be restarted
	dir   string // data directory's parent (owned only)
	bin   string
	port  int
	cred  *syscall.Credential // nil unless running as root
	env   []string            // extra environment of the server's processes
	conf  []string            // extra settings, "name=value"
	mu    sync.Mutex          // serialises Stop/Start
}

// available starts the server once, or says why there is none.
func available() (*server, error) {
	once.Do(func() { srv, srvErr = start() })
	return srv, srvErr
}

var errMissing = errors.New(missing)

func start() (*server, error) {
	if u := os.Getenv(EnvURL); u != "" {
		return &server{base: u}, nil
	}
	bin := findBin()
	if bin == "" {
		return nil, errMissing
	}
	reapStale(bin)
	return startOwned(&server{bin: bin, owned: true}, true)
}

// startOwned makes s's data directory (with initdb, or, when initdb is
// false, by the caller before it starts: a standby's base backup) and
// starts it.
func startOwned(s *server, initdb bool) (*server, error) {
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pgtest: running as root, and PostgreSQL refuses root: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	var err error
	if s.dir, err = os.MkdirTemp("", dirPrefix); err != nil {
		return nil, err
	}
	// Whose server this is, for reapStale.
	if err := os.WriteFile(filepath.Join(s.dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		s.remove()
		return nil, err
	}
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			s.remove()
			return nil, err
		}
	}
	if initdb {
		if out, err := s.run("initdb", "-D", s.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"); err != nil {
			s.remove()
			return nil, fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
		}
		if err := s.startServer(); err != nil {
			s.remove()
			return nil, err
		}
	}
	s.base = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", s.port)
	return s, nil
}

const dirPrefix = "lhrelay-pgtest-"

// reapStale stops and removes the servers of earlier test binaries that
// died without stopping theirs (killed, or ended by go test's -timeout):
// a server whose owner process is gone.
func reapStale(bin string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "owner.pid"))
		if err != nil {
			continue // not ours, or not yet written: leave it
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue // the owner lives (or cannot be told)
		}
		stale := &server{bin: bin, dir: d, owned: true}
		if st, err := os.Stat(filepath.Join(d, "data")); err == nil && os.Geteuid() == 0 {
			if sys, ok := st.Sys().(*syscall.Stat_t); ok {
				stale.cred = &syscall.Credential{Uid: sys.Uid, Gid: sys.Gid}
			}
		}
		stale.run("pg_ctl", "-D", stale.data(), "-m", "immediate", "-w", "stop")
		stale.remove()
	}
}

// findBin finds the directory of initdb and pg_ctl: PATH, then the
// Debian layout /usr/lib/postgresql/<version>/bin, newest first.
func findBin() string {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			// A link on PATH (/usr/local/bin/pg_ctl) leads to the
			// directory holding the other binaries (pg_basebackup).
			if real, err := filepath.EvalSymlinks(p); err == nil {
				p = real
			}
			return filepath.Dir(p)
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			return dirs[i]
		}
	}
	return ""
}

func (s *server) data() string { return filepath.Join(s.dir, "data") }

// run runs one of the server's binaries (as postgres when root).
func (s *server) run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd.CombinedOutput()
}

// startServer starts the server on a free port (a new one if the last is
// taken meanwhile) and waits until it accepts connections.
func (s *server) startServer() error {
	var lastErr error
	for range 3 {
		if s.port == 0 || lastErr != nil {
			p, err := freePort()
			if err != nil {
				return err
			}
			s.port = p
		}
		args := []string{
			"-p", strconv.Itoa(s.port),
			"-k", s.dir,
			"-c", "listen_addresses=127.0.0.1",
			"-c", "max_connections=400",
			"-c", "shared_buffers=64MB",
			"-c", "log_min_messages=warning",
		}
		for _, c := range s.conf {
			args = append(args, "-c", c)
		}
		opts := strings.Join(args, " ")
		out, err := s.run("pg_ctl", "-D", s.data(), "-l", filepath.Join(s.dir, "server.log"), "-w", "-t", "60", "-o", opts, "start")
		if err == nil {
			return nil
		}
		log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
		lastErr = fmt.Errorf("pgtest: pg_ctl start: %w\n%s\n%s", err, out, log)
	}
	return lastErr
}

func (s *server) stop() error {
	if !s.owned {
		return nil
	}
	if out, err := s.run("pg_ctl", "-D", s.data(), "-m", "fast", "-w", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop: %w\n%s", err, out)
	}
	return nil
}

func (s *server) remove() {
	if s.owned && s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// need returns the server, or skips t (fails it under
// LHRELAY_REQUIRE_POSTGRES=1) when there is none.
func need(t testing.TB) *server {
	t.Helper()
	s, err := available()
	if errors.Is(err, errMissing) {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s=1, but: %v", EnvRequire, err)
		}
		t.Skip(missing)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// URL returns the URL of a fresh, empty schema for t on the server: the
// ledger's tables are created in it. The schema stays until the server is
// removed.
func URL(t testing.TB) string {
	t.Helper()
	s := need(t)
	name := fmt.Sprintf("t%d_%d", os.Getpid(), schemas.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.base)
	if err != nil {
		t.Fatalf("pgtest: connect %s: %v", s.base, err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	return withParam(s.base, "search_path", name)
}

func withParam(u, k, v string) string {
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + k + "=" + v
}

// Stop stops the throwaway server (fast shutdown: sessions are cut off, as
// in a restart for patching) and Start starts it again on the same port.
// Tests on a server they did not start skip.
func Stop(t testing.TB) {
	t.Helper()
	s := owned(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
}

// Start: see Stop.
func Start(t testing.TB) {
	t.Helper()
	s := owned(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.startServer(); err != nil {
		t.Fatal(err)
	}
}

// Restart is pg_ctl restart -m fast.
func Restart(t testing.TB) {
	t.Helper()
	s := owned(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	// -l again: pg_ctl reuses the server's options, not its own, and a
	// server writing to this process's pipe would keep it open.
	if out, err := s.run("pg_ctl", "-D", s.data(), "-l", filepath.Join(s.dir, "server.log"), "-m", "fast", "-w", "-t", "60", "restart"); err != nil {
		t.Fatalf("pg_ctl restart: %v\n%s", err, out)
	}
}

func owned(t testing.TB) *server {
	t.Helper()
	s := need(t)
	if !s.owned {
		t.Skipf("needs a PostgreSQL server the tests start (%s names one they cannot restart)", EnvURL)
	}
	return s
}

// ServerPID is the postmaster's process id (owned server only; 0 if
// unknown): benchmarks read the server's CPU time from /proc.
func ServerPID(t testing.TB) int {
	s := owned(t)
	b, err := os.ReadFile(filepath.Join(s.data(), "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	return pid
}

// AdminURL is the URL of the server's maintenance database (for reading
// server-wide statistics such as pg_stat_wal).
func AdminURL(t testing.TB) string { return need(t).base }

// SetSSL turns TLS on for the throwaway server with the given server
// certificate and key (PEM), or off when certPEM is nil, and restarts it
// (pg_ctl restart -m fast, as Restart). At the end of t the server is
// back to its default, TLS off. Tests that use it must not run in
// parallel with other tests of their package: sessions are cut off.
func SetSSL(t testing.TB, certPEM, keyPEM []byte) {
	t.Helper()
	s := owned(t)
	set := func(on bool) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, s.base)
		if err != nil {
			return fmt.Errorf("pgtest: connect %s: %w", s.base, err)
		}
		defer c.Close(ctx)
		stmts := []string{`ALTER SYSTEM RESET ssl`, `ALTER SYSTEM RESET ssl_cert_file`, `ALTER SYSTEM RESET ssl_key_file`}
		if on {
			stmts = []string{
				`ALTER SYSTEM SET ssl = on`,
				fmt.Sprintf(`ALTER SYSTEM SET ssl_cert_file = '%s'`, filepath.Join(s.dir, "server.crt")),
				fmt.Sprintf(`ALTER SYSTEM SET ssl_key_file = '%s'`, filepath.Join(s.dir, "server.key")),
			}
		}
		for _, q := range stmts {
			if _, err := c.Exec(ctx, q); err != nil {
				return fmt.Errorf("pgtest: %s: %w", q, err)
			}
		}
		return nil
	}
	restart := func() error {
		if out, err := s.run("pg_ctl", "-D", s.data(), "-l", filepath.Join(s.dir, "server.log"), "-m", "fast", "-w", "-t", "60", "restart"); err != nil {
			log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			return fmt.Errorf("pg_ctl restart: %w\n%s\n%s", err, out, log)
		}
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if certPEM != nil {
		// PostgreSQL refuses a key readable by others or owned by
		// someone else.
		for name, b := range map[string][]byte{"server.crt": certPEM, "server.key": keyPEM} {
			p := filepath.Join(s.dir, name)
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if s.cred != nil {
				if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := set(certPEM != nil); err != nil {
		t.Fatal(err)
	}
	if err := restart(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := set(false); err != nil {
			t.Error(err)
			return
		}
		if err := restart(); err != nil {
			t.Error(err)
		}
	})
}
