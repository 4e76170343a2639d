package ledger

import (
	"context"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/testkit"
)

// TestTryExclusive: of the processes sharing a ledger one holds a named
// lock at a time; release frees it; other names are independent. On
// PostgreSQL the end of the holder's session frees it too (Close here).
func TestTryExclusive(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, db string) {
		ctx := context.Background()
		a := openLedger(t, db)
		b := openLedger(t, db)

		release, ok, err := a.TryExclusive(ctx, "settle")
		assert.NilError(t, err)
		assert.Assert(t, ok)
		_, ok, err = b.TryExclusive(ctx, "settle")
		assert.NilError(t, err)
		assert.Assert(t, !ok, "two holders")
		other, ok, err := b.TryExclusive(ctx, "other")
		assert.NilError(t, err)
		assert.Assert(t, ok, "another name is another lock")
		other()

		release()
		releaseB, ok, err := b.TryExclusive(ctx, "settle")
		assert.NilError(t, err)
		assert.Assert(t, ok, "released, yet not free")
		if a.Store() != "postgres" {
			releaseB()
			return
		}
		assert.NilError(t, b.Close()) // the holder's session ends without releasing
		release, ok, err = a.TryExclusive(ctx, "settle")
		assert.NilError(t, err)
		assert.Assert(t, ok, "the end of the holder's session did not free the lock")
		release()
	})
}
