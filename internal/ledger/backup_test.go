package ledger

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/testkit"
)

// TestBackupWhileWriting takes a backup while writers claim and finish
// rows: the copy opens as a ledger and holds every row committed before the
// backup began, and the writers were never refused.
func TestBackupWhileWriting(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, dbPath(t))
	write := func(n int) []string {
		var guids []string
		for range n {
			g := testkit.GUID()
			_, err := l.Claim(ctx, request(txTransfer, g, sentAt1, "body"))
			assert.NilError(t, err)
			assert.NilError(t, l.Finish(ctx, g, 1, Outcome{Why: Why{Reason: "test"}, State: StateDone, RspCode: "0000", Response: responseFrame(g, "0000")}))
			guids = append(guids, g)
		}
		return guids
	}
	before := write(200)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var during []string
	wg.Add(1)
	go func() { // keeps committing through the backup
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				during = append(during, write(1)...)
			}
		}
	}()
	to := filepath.Join(t.TempDir(), "backup.db")
	size, err := l.Backup(ctx, to)
	close(stop)
	wg.Wait()
	assert.NilError(t, err)
	assert.Assert(t, size > 0)

	b, err := OpenExisting(to)
	assert.NilError(t, err)
	defer b.Close()
	st, err := b.Stats(ctx)
	assert.NilError(t, err)
	assert.Assert(t, st.Total >= int64(len(before)), "%d rows", st.Total)
	for _, g := range before {
		row, err := b.Get(ctx, g)
		assert.NilError(t, err)
		assert.Equal(t, row.State, StateDone)
		es, err := b.History(ctx, g)
		assert.NilError(t, err)
		assert.Equal(t, len(es), 2, "the copy holds the history")
	}
	_, err = b.Audit(ctx)
	assert.NilError(t, err, "the copy's history verifies")
	t.Logf("rows committed during the backup: %d; in the copy: %d", len(during), st.Total-int64(len(before)))

	leftovers, err := filepath.Glob(filepath.Join(filepath.Dir(to), ".backup.db.partial-*"))
	assert.NilError(t, err)
	assert.Equal(t, len(leftovers), 0, "no temporary file left")
}

func TestBackupRefusesToOverwrite(t *testing.T) {
	l := openLedger(t, dbPath(t))
	to := filepath.Join(t.TempDir(), "exists.db")
	assert.NilError(t, os.WriteFile(to, []byte("keep me"), 0o600))
	_, err := l.Backup(context.Background(), to)
	assert.ErrorContains(t, err, "the file exists")
	got, err := os.ReadFile(to)
	assert.NilError(t, err)
	assert.Equal(t, string(got), "keep me")

	_, err = l.Backup(context.Background(), filepath.Join(t.TempDir(), "no-dir", "b.db"))
	assert.ErrorContains(t, err, "backup to")
}
