package ledger

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/testkit"
)

func TestWALPages(t *testing.T) {
	for _, tc := range []struct {
		fsBytes, pageSize, want int64
	}{
		{0, 4096, walCheckpointPages}, // file system unknown
		{1 << 40, 4096, walCheckpointPages},
		{walShare * walCheckpointPages * (4096 + walFrameHeader), 4096, walCheckpointPages},
		{16 << 20, 4096, 254}, // 16 MiB: 1 MiB of WAL
		{16 << 20, 65536, 15},
		{4096, 4096, 1},
	} {
		assert.Equal(t, walPages(tc.fsBytes, tc.pageSize), tc.want, "%d bytes, pages of %d", tc.fsBytes, tc.pageSize)
	}
}

// TestWALLeavesRoomForItsCheckpoint: a ledger alone on a 16 MiB file
// system takes transfers, eight at a time, far past the point where a
// WAL checkpointed every walCheckpointPages pages (16 MB) filled the disk
// and no commit succeeded again: its checkpoint had no room left to copy
// the pages into the database file. Checkpointed at a sixteenth of the
// file system, every claim and outcome commits, and the WAL file stays
// within the size it is cut back to.
func TestWALLeavesRoomForItsCheckpoint(t *testing.T) {
	const fsBytes = 16 << 20
	path := filepath.Join(testkit.MountTmpfs(t, fsBytes), "relay.db")
	l := openLedger(t, path)
	ctx := context.Background()

	var ckpt, limit int64
	assert.NilError(t, sqliteOf(l).do(ctx, operation{run: opFunc(func(tx stmts) error {
		if err := tx.queryRow(`PRAGMA wal_autocheckpoint`).Scan(&ckpt); err != nil {
			return err
		}
		return tx.queryRow(`PRAGMA journal_size_limit`).Scan(&limit)
	})}))
	assert.Check(t, is.Equal(ckpt, walPages(fsBytes, 4096)))
	assert.Check(t, is.Equal(limit, 2*ckpt*(4096+walFrameHeader)+walHeader))

	// About 20 KB of WAL a transfer: 2,000 of them are 40 MB of WAL.
	const channels, each = 8, 250
	errs := make(chan error, channels)
	var wg sync.WaitGroup
	for range channels {
		wg.Go(func() { errs <- transfers(ctx, l, each) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NilError(t, err)
	}
	st, err := l.Stats(ctx)
	assert.NilError(t, err)
	assert.Equal(t, st.ByState[StateDone], int64(channels*each))
	wal, err := os.Stat(path + "-wal")
	assert.NilError(t, err)
	assert.Assert(t, wal.Size() <= limit, "WAL of %d bytes, cut back to %d", wal.Size(), limit)
	t.Logf("WAL %d bytes, database %d bytes", wal.Size(), fileSize(t, path))
}

// transfers claims n new GUIDs one after the other and records each DONE,
// as one channel's transfers would be.
func transfers(ctx context.Context, l *Ledger, n int) error {
	for range n {
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		c, err := l.Claim(ctx, r)
		if err != nil {
			return err
		}
		if err := l.Finish(ctx, r.GUID, c.Attempts, Outcome{Why: Why{Reason: "test"}, State: StateDone, RspCode: codeOK, Response: responseFrame(r.GUID, codeOK)}); err != nil {
			return err
		}
	}
	return nil
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	assert.NilError(t, err)
	return fi.Size()
}
