package pgtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// ScratchDir is a new, empty directory that v's processes and the clients
// StartClient runs may write to (a WAL archive, a base backup). It is
// removed with v.
func (v *Server) ScratchDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp(v.s.dir, "scratch-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if c := v.s.cred; c != nil {
		if err := os.Chown(dir, int(c.Uid), int(c.Gid)); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	return dir
}

// StartClient starts the client program name of v's installation
// (pg_receivewal, pg_basebackup, pg_recvlogical, …) in the background,
// connected to v as its superuser (-h, -p and -U come before args), as the
// user v's processes run as, in a process group of its own (pg_basebackup
// forks its WAL streamer). The group is stopped when t ends (SIGTERM, then
// SIGKILL after 10 s), and what the program printed is logged if t
// failed.
func (v *Server) StartClient(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	s := v.s
	args = append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "postgres"}, args...)
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cred}
	// A file, not a pipe: a pipe would keep Wait waiting for whatever
	// the program forked.
	out, err := os.CreateTemp(s.dir, name+"-*.out")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("pgtest: %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		group := -cmd.Process.Pid
		syscall.Kill(group, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(group, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("%s printed:\n%s", name, b)
		}
	})
	return cmd
}
