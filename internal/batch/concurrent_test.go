package batch

import (
	"context"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/testkit"
)

// Batch commands run from several hosts at once on one ledger (SPEC 6a):
// each run has its own Ledger, as a process of its own would, and both
// start together. No row is resent, settled or deleted twice.

// twice runs fn on two Ledgers of tl's ledger at once and returns both
// summaries.
func twice(t *testing.T, tl *testLedger, fn func(l *ledger.Ledger) (*Summary, error)) [2]*Summary {
	t.Helper()
	var out [2]*Summary
	var errs [2]error
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 2 {
		l, err := ledger.OpenExisting(tl.path)
		assert.NilError(t, err)
		t.Cleanup(func() { l.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i], errs[i] = fn(l)
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		assert.NilError(t, err)
	}
	return out
}

func TestTwoReprocessRunsSendEachRowOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		c := newCore(t)
		const rows = 120
		guids := make([]string, rows)
		for i := range guids {
			guids[i] = tl.seed(ledger.StateFailed, generated.RspConnectFail, time.Hour)
		}
		s := twice(t, tl, func(l *ledger.Ledger) (*Summary, error) {
			return Reprocess(context.Background(), l, c.client(t), ReprocessConfig{MaxAttempts: 5})
		})
		ok := string(generated.RspHTTP200)
		t.Logf("%s | %s", s[0], s[1])
		assert.Equal(t, s[0].Count(ok)+s[1].Count(ok), rows, "each row sent by exactly one run")
		assert.Equal(t, s[0].Count("selected")+s[1].Count("selected"), rows+s[0].Count("skipped")+s[1].Count("skipped"))
		assert.Equal(t, c.posts.Load(), int64(rows))
		for _, g := range guids {
			assert.Equal(t, c.sim.PostCount(g), 1, g)
			r := tl.row(g)
			assert.Equal(t, r.State, ledger.StateDone)
			assert.Equal(t, r.Attempts, 2, "re-claimed once")
		}
	})
}

func TestTwoResolveRunsSettleEachRowOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		c := newCore(t)
		const rows = 120
		posted := map[string]bool{}
		for i := range rows {
			state := ledger.StateUnknown
			if i%3 == 0 {
				state = ledger.StateSent // orphaned by a dead relay
			}
			g := tl.seed(state, generated.RspReadTimeout, time.Hour)
			if i%2 == 0 {
				c.post(t, tl, g)
				posted[g] = true
			} else {
				posted[g] = false
			}
		}
		postsBefore := c.posts.Load()
		s := twice(t, tl, func(l *ledger.Ledger) (*Summary, error) {
			return Resolve(context.Background(), l, c.client(t), ResolveConfig{MinAge: time.Minute, StaleSent: time.Minute})
		})
		t.Logf("%s | %s", s[0], s[1])
		sum := func(k string) int { return s[0].Count(k) + s[1].Count(k) }
		assert.Equal(t, sum("done"), rows/2)
		assert.Equal(t, sum("failed"), rows/2)
		assert.Equal(t, sum("selected"), rows+sum("skipped"))
		assert.Equal(t, c.posts.Load(), postsBefore, "resolve never POSTs")
		for g, p := range posted {
			want := ledger.StateFailed
			if p {
				want = ledger.StateDone
			}
			assert.Equal(t, tl.row(g).State, want, g)
		}
	})
}

func TestTwoPurgeRunsDeleteEachRowOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, tl *testLedger) {
		const rows = 2500 // more than two of the ledger's chunks
		old := tl.raw.Time(time.Now().Add(-40 * day))
		for i := 0; i < rows; i += 500 {
			var args []any
			q := `INSERT INTO tx(guid, tx_code, state, rsp_code, request, response, attempts, updated_at) VALUES `
			for j := i; j < i+500; j++ {
				if j > i {
					q += ", "
				}
				q += "(?, 'BKTR0001', 'DONE', '0000', ?, ?, 1, ?)"
				args = append(args, testkit.GUID(), []byte{0}, []byte{0}, old)
			}
			tl.raw.Exec(q, args...)
		}
		keep := tl.seed(ledger.StateDone, generated.RspHTTP200, 29*day)
		s := twice(t, tl, func(l *ledger.Ledger) (*Summary, error) {
			return Purge(context.Background(), l, PurgeConfig{Days: 30})
		})
		t.Logf("%s | %s", s[0], s[1])
		assert.Equal(t, s[0].Count("deleted")+s[1].Count("deleted"), rows)
		st, err := tl.l.Stats(context.Background())
		assert.NilError(t, err)
		assert.Equal(t, st.Total, int64(1))
		assert.Assert(t, tl.exists(keep))
	})
}
