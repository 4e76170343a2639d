package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

// TestVersionOfABuiltBinary builds the command as an operator would and
// checks that --version names the commit it was built from. Go stamps the
// revision only in a checkout whose .git is a directory (a clean clone, as
// CI has); in a git worktree the binary says the revision is unknown.
func TestVersionOfABuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skip("no git checkout: cannot tell which revision to expect")
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	assert.NilError(t, err)
	bin := filepath.Join(t.TempDir(), "relay")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=")
	out, err := build.CombinedOutput()
	assert.NilError(t, err, string(out))

	got, err := exec.Command(bin, "--version").Output()
	assert.NilError(t, err)
	assert.Assert(t, strings.HasPrefix(string(got), "relay: lhrelay "), string(got))
	if fi, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err == nil && fi.IsDir() {
		assert.Assert(t, strings.Contains(string(got), "revision "+strings.TrimSpace(string(head))), string(got))
	} else {
		assert.Assert(t, strings.Contains(string(got), "revision unknown"), string(got))
	}
}
