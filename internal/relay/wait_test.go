package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// boundedWait ends as context.WithTimeout from its start would: past its
// deadline, or with its parent; it makes its context only for Done.
func TestBoundedWait(t *testing.T) {
	var w boundedWait
	t.Run("before its deadline", func(t *testing.T) {
		before := time.Now()
		w.start(context.Background(), time.Hour)
		defer w.stop()
		assert.NilError(t, w.Err())
		d, ok := w.Deadline()
		assert.Assert(t, ok)
		assert.Assert(t, !d.Before(before.Add(time.Hour)) && !d.After(time.Now().Add(time.Hour)), "deadline %v", d)
		done := w.Done()
		select {
		case <-done:
			t.Fatal("done before its deadline")
		default:
		}
		assert.NilError(t, w.Err())
		w.stop()
		<-done // stop ends it, as a cancel does
	})
	t.Run("past its deadline", func(t *testing.T) {
		w.start(context.Background(), 0)
		defer w.stop()
		assert.Assert(t, errors.Is(w.Err(), context.DeadlineExceeded), "got %v", w.Err())
		<-w.Done()
		assert.Assert(t, errors.Is(w.Err(), context.DeadlineExceeded), "got %v", w.Err())
	})
	t.Run("parent ended", func(t *testing.T) {
		parent, cancel := context.WithCancel(context.Background())
		cancel()
		w.start(parent, time.Hour)
		defer w.stop()
		assert.Assert(t, errors.Is(w.Err(), context.Canceled), "got %v", w.Err())
		<-w.Done()
		assert.Assert(t, errors.Is(w.Err(), context.Canceled), "got %v", w.Err())
	})
	t.Run("an earlier parent deadline", func(t *testing.T) {
		parent, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pd, _ := parent.Deadline()
		w.start(parent, time.Hour)
		defer w.stop()
		d, ok := w.Deadline()
		assert.Assert(t, ok)
		assert.Equal(t, d, pd)
	})
	t.Run("a wait that needs no Done allocates nothing", func(t *testing.T) {
		allocs := testing.AllocsPerRun(50, func() {
			w.start(context.Background(), time.Hour)
			if w.Err() != nil {
				t.Fatal(w.Err())
			}
			w.stop()
		})
		assert.Equal(t, allocs, 0.0)
	})
}
