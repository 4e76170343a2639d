package ledger

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/testkit"
)

func TestConcurrentClaimsOfOneGUID(t *testing.T) {
	eachStore(t, testConcurrentClaimsOfOneGUID)
}

func testConcurrentClaimsOfOneGUID(t *testing.T, l *Ledger) {
	guid := testkit.GUID()
	const n = 100

	var wg sync.WaitGroup
	outcomes := make([]ClaimOutcome, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Each retry has its own SENT_AT: still the same request.
			sent := sentAt1
			if i%2 == 1 {
				sent = sentAt2
			}
			c, err := l.Claim(context.Background(), request(txTransfer, guid, sent, bodyA))
			outcomes[i], errs[i] = c.Outcome, err
		}()
	}
	close(start)
	wg.Wait()

	count := map[ClaimOutcome]int{}
	for i := range n {
		assert.NilError(t, errs[i])
		count[outcomes[i]]++
	}
	assert.DeepEqual(t, count, map[ClaimOutcome]int{Owned: 1, InProgress: n - 1})

	row, err := l.Get(context.Background(), guid)
	assert.NilError(t, err)
	assert.Equal(t, row.Attempts, 1)
}

// 64 channels claim and finish distinct GUIDs while a second Ledger on the
// same ledger (a batch command in another process) settles UNKNOWN rows:
// nobody sees "database is locked" (or a lock timeout), and the group
// commit groups.
func TestManyChannelsAndABatchCommand(t *testing.T) {
	testkit.EachStore(t, testManyChannelsAndABatchCommand)
}

func testManyChannelsAndABatchCommand(t *testing.T, path string) {
	ctx := context.Background()
	relay := openLedger(t, path)

	// Rows for the "batch command" to settle.
	const unknown = 300
	unknownGUIDs := make([]string, unknown)
	for i := range unknownGUIDs {
		r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
		seed(t, relay, r, StateUnknown, codeTimeout)
		unknownGUIDs[i] = r.GUID
	}

	batch := openLedger(t, path) // a second, independent Ledger
	commitsBefore := relay.Commits()

	const channels, perChannel = 64, 40
	var wg sync.WaitGroup
	errCh := make(chan error, channels*perChannel+unknown)
	start := make(chan struct{})
	for range channels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range perChannel {
				r := request(txTransfer, testkit.GUID(), sentAt1, bodyA)
				c, err := relay.Claim(ctx, r)
				if err != nil {
					errCh <- err
					continue
				}
				if c.Outcome != Owned {
					errCh <- errors.New("not owned: " + c.Outcome.String())
					continue
				}
				if err := relay.Finish(ctx, r.GUID, 1, Outcome{Why: Why{Reason: "test"}, State: StateDone, RspCode: codeOK, Response: responseFrame(r.GUID, codeOK)}); err != nil {
					errCh <- err
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		for _, g := range unknownGUIDs {
			if err := batch.Transition(ctx, g, StateUnknown, Outcome{Why: Why{Reason: "test"}, State: StateDone, RspCode: codeOK, Response: responseFrame(g, codeOK)}); err != nil {
				errCh <- err
			}
		}
	}()
	close(start)
	wg.Wait()
	close(errCh)
	for err := range errCh {
		assert.Check(t, !strings.Contains(err.Error(), "locked"), "lock error: %v", err)
		assert.NilError(t, err)
	}

	st, err := relay.Stats(ctx)
	assert.NilError(t, err)
	assert.Equal(t, st.ByState[StateDone], int64(channels*perChannel+unknown))
	assert.Equal(t, st.Total, int64(channels*perChannel+unknown))

	ops := uint64(2 * channels * perChannel)
	commits := relay.Commits() - commitsBefore
	t.Logf("%d claims+finishes in %d commits (%.3f commits/op)", ops, commits, float64(commits)/float64(ops))
	assert.Check(t, commits < ops/2, "group commit did not group: %d commits for %d ops", commits, ops)
}

// Close while ops are queued: every caller gets a result or an error, and
// nothing hangs.
func TestCloseWhileQueued(t *testing.T) {
	testkit.EachStore(t, testCloseWhileQueued)
}

func testCloseWhileQueued(t *testing.T, db string) {
	l, err := Open(db)
	assert.NilError(t, err)
	release := blockWriter(t, l)

	const n = 200
	type result struct {
		c   Claim
		err error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			c, err := l.Claim(context.Background(), request(txTransfer, testkit.GUID(), sentAt1, bodyA))
			results <- result{c, err}
		}()
	}
	waitQueued(t, l, 50)

	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	time.Sleep(10 * time.Millisecond) // let Close start waiting
	release()

	timeout := time.After(10 * time.Second)
	var owned, refused int
	for range n {
		select {
		case r := <-results:
			switch {
			case r.err == nil:
				assert.Equal(t, r.c.Outcome, Owned)
				owned++
			case errors.Is(r.err, ErrClosed):
				refused++
			default:
				t.Errorf("unexpected error: %v", r.err)
			}
		case <-timeout:
			t.Fatal("a Claim hung across Close")
		}
	}
	select {
	case err := <-closed:
		assert.NilError(t, err)
	case <-timeout:
		t.Fatal("Close hung")
	}
	t.Logf("owned %d, refused %d", owned, refused)
	assert.Check(t, owned >= 50, "queued ops were dropped")
	assert.Equal(t, owned+refused, n)

	// Every Owned claim is on disk.
	l2 := openLedger(t, l.Path())
	st, err := l2.Stats(context.Background())
	assert.NilError(t, err)
	assert.Equal(t, st.ByState[StateSent], int64(owned))
}
