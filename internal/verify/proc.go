package verify

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// proc is one process the runner started; it is stopped by its PID only.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	err  error         // its exit, once done
}

// startProc starts bin, copies its output to logf, and waits (at most
// within) for a line of standard output starting with ready, whose rest it
// returns.
func startProc(name, bin string, args, env []string, logf io.Writer, ready string, within time.Duration) (*proc, string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	lines := make(chan string, 1)
	if ready == "" {
		go func() {
			_, _ = io.Copy(logf, out)
			p.err = cmd.Wait()
			close(p.done)
		}()
		return p, "", nil
	}
	go func() {
		sc := bufio.NewScanner(out)
		found := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if !found && strings.HasPrefix(line, ready) {
				found = true
				lines <- strings.TrimPrefix(line, ready)
			}
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	select {
	case rest := <-lines:
		return p, strings.TrimSpace(rest), nil
	case <-p.done:
		return nil, "", fmt.Errorf("%s exited before it was ready: %v", name, p.err)
	case <-time.After(within):
		p.kill()
		return nil, "", fmt.Errorf("%s not ready within %v", name, within)
	}
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// term sends SIGTERM and waits up to within for the exit, then kills. It
// reports a stop that was not clean.
func (p *proc) term(within time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		var ee *exec.ExitError
		if errors.As(p.err, &ee) {
			return fmt.Errorf("%s: SIGTERM: %w", p.name, p.err)
		}
		return nil
	case <-time.After(within):
		p.kill()
		return fmt.Errorf("%s: no exit within %v of SIGTERM: killed", p.name, within)
	}
}
