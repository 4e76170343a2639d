package ledger

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/testkit"
)

// TestFilesOwnerOnly: the ledger, its -wal and -shm, and a backup are
// readable by their owner only, even under a umask that would let anyone
// read them (SPEC 6). Not parallel: the umask is the process's.
func TestFilesOwnerOnly(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })

	path := dbPath(t)
	l := openLedger(t, path)
	seed(t, l, request(txTransfer, testkit.GUID(), sentAt1, bodyA), StateDone, codeOK)
	backup := filepath.Join(filepath.Dir(path), "backup.db")
	_, err := l.Backup(context.Background(), backup)
	assert.NilError(t, err)
	for _, f := range []string{path, path + "-wal", path + "-shm", backup} {
		st, err := os.Stat(f)
		assert.NilError(t, err)
		assert.Equal(t, st.Mode().Perm(), os.FileMode(0o600), f)
	}
}
