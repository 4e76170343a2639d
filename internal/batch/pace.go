package batch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"lhrelay/internal/admit"
	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

// Pace is how a resolve or reprocess run goes through its rows. After an
// outage the ledger may hold hundreds of thousands of them: one at a time,
// each waiting for its own core call and its own commits, they would take
// hours. So a run handles many rows at once, each core call admitted by
// the same admission the relay uses (SPEC 5.12: a core that just came back
// is not flooded), and the rows' ledger writes, made concurrently, share
// the ledger's group commits as the relay's do. Every row is still handled
// by exactly the rules of one row alone.
type Pace struct {
	// MaxInFlight is the most core calls (lookups, resends) in flight at
	// once (--max-inflight, as the relay's); 0: DefaultMaxInFlight.
	MaxInFlight int
	// Rows is the most rows in flight at once; 0: RowsPerCall ×
	// MaxInFlight. A row spends most of its time waiting for the
	// ledger's commits (a re-claim and an outcome for a resend), not for
	// the core: several rows per call keep both the core's slots and each
	// commit full.
	Rows int
	// Rate, when more than 0, is the most rows a second the run starts
	// (--rate), for an operator who wants to go gently.
	Rate float64
	// Limiter admits each core call too, within MaxInFlight (the run's
	// own adaptive limit, or the relay's); nil: MaxInFlight alone. A call
	// that is not admitted waits for a slot and asks again: a batch row
	// has no channel waiting on a timeout, so admission never turns into
	// a code recorded on a row.
	Limiter *admit.Limiter
	// Yield takes a call slot of Limiter only while it has room, so that
	// the frames sharing it (the relay's own settling) come first.
	Yield bool
}

// DefaultMaxInFlight is the core calls a run has in flight unless told:
// enough to keep a core's connections busy, few enough for one just back.
const DefaultMaxInFlight = 16

// RowsPerCall is how many rows a run keeps in flight per call slot unless
// Pace.Rows says otherwise. A resent row spends about a tenth of its time
// at the core and the rest in two commits (the re-claim, the outcome):
// sixteen rows a slot fill each commit with more rows (BenchmarkBatchOutage:
// reprocess on SQLite 3,912 rows/s against 3,566 with four).
const RowsPerCall = 16

// retryAdmit bounds how long a call that was not admitted waits before it
// asks again when no call of the run has ended meanwhile (one that ended
// frees a slot, and wakes it at once).
const retryAdmit = 5 * time.Millisecond

// errStopping is a row's, when the run stopped before it changed
// anything: the row is not tried.
var errStopping = errors.New("the run is stopping")

// pacer runs the rows of one run on up to Pace.Rows workers, and admits
// their core calls.
//
// It starts with one row in flight and lets one more in for every row
// that ends (TCP's slow start: the window doubles with each round of
// rows), up to MaxInFlight. So the first row alone finds out whether the
// core is there: a reprocess run into an outage spends one attempt, as a
// run of one row at a time did, and a core that just came back sees the
// batch arrive in a few round trips rather than all at once.
type pacer struct {
	pace  Pace
	wg    sync.WaitGroup
	start time.Time
	begun int // rows handed to workers, for the rate

	// stopping: no new row is begun (the run reached a row the core
	// could not be reached for, the ledger failed, or ctx ended).
	stopping atomic.Bool

	calls chan struct{} // one per core call in flight (MaxInFlight)

	mu       sync.Mutex
	inFlight int           // rows begun and not ended
	window   int           // rows that may be in flight now
	ended    chan struct{} // closed (and replaced) whenever a row or a call of the run ends
	err      error         // the first error that stopped the run (the ledger's)
	halt     *halt         // the row the run stopped at because the core could not be reached
	unusable *halt         // the first row whose lookup the core answered with nothing usable
}

// halt is the first row of a run that the core could not be reached for:
// the run stopped there (SPEC 7).
type halt struct {
	row ledger.Row
	// lookupErr is the error of the row's lookup, when that failed; nil
	// when the lookup (if any) answered and the resend could not connect.
	lookupErr error
}

func newPacer(p Pace) *pacer {
	if p.MaxInFlight <= 0 {
		p.MaxInFlight = DefaultMaxInFlight
	}
	if p.Rows <= 0 {
		p.Rows = RowsPerCall * p.MaxInFlight
	}
	return &pacer{pace: p, start: time.Now(), window: 1, ended: make(chan struct{}), calls: make(chan struct{}, p.MaxInFlight)}
}

// begin hands row to handle on a worker of its own, once the rate allows
// and the window has room. It returns errStopping (which ends the
// caller's scan) once the run is stopping, and ctx's error, wrapped, when
// ctx ends first.
func (p *pacer) begin(ctx context.Context, handle func()) error {
	if p.stopping.Load() {
		return errStopping
	}
	if r := p.pace.Rate; r > 0 {
		at := p.start.Add(time.Duration(float64(p.begun) / r * float64(time.Second)))
		if d := time.Until(at); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("stopped: %w", ctx.Err())
			case <-t.C:
			}
		}
	}
	for {
		p.mu.Lock()
		if p.stopping.Load() {
			p.mu.Unlock()
			return errStopping
		}
		if p.inFlight < p.window {
			p.inFlight++
			p.mu.Unlock()
			break
		}
		ended := p.ended
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped: %w", ctx.Err())
		case <-ended:
		}
	}
	p.begun++
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.rowEnded()
		handle()
	}()
	return nil
}

// rowEnded frees the row's place and widens the window by one.
func (p *pacer) rowEnded() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inFlight--
	p.window = min(p.window+1, p.pace.Rows)
	p.wakeLocked()
}

func (p *pacer) wakeLocked() {
	close(p.ended)
	p.ended = make(chan struct{})
}

// wait waits for the rows in flight and returns the error that stopped
// the run, if any.
func (p *pacer) wait() error {
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// stop makes the run begin no new row; err, when not nil and the first,
// is the run's error.
func (p *pacer) stop(err error) {
	p.stopping.Store(true)
	if err == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
	}
}

// haltAt stops the run at row, which the core could not be reached for:
// no new row is begun, and the rows in flight finish. The first such row
// is the one the run reports (halted).
func (p *pacer) haltAt(row ledger.Row, lookupErr error) {
	p.mu.Lock()
	if p.halt == nil {
		p.halt = &halt{row: row, lookupErr: lookupErr}
	}
	p.mu.Unlock()
	p.stop(nil)
}

// unsettled records row, whose lookup the core answered with nothing that
// settles it (corecall.ErrUnusableAnswer): the row is unchanged and, the
// core being there, the run goes on. The first such row is the one the run
// reports (firstUnusable).
func (p *pacer) unsettled(row ledger.Row, lookupErr error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.unusable == nil {
		p.unusable = &halt{row: row, lookupErr: lookupErr}
	}
}

// firstUnusable is the first row unsettled recorded, nil if none; read
// after wait.
func (p *pacer) firstUnusable() *halt {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unusable
}

// halted is the row the run stopped at, nil if it did not; read after
// wait.
func (p *pacer) halted() *halt {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.halt
}

// callEnded wakes the calls waiting to be admitted.
func (p *pacer) callEnded() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wakeLocked()
}

func (p *pacer) endedCh() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended
}

// admit waits until one core call may be made: a slot of MaxInFlight,
// then the limiter's. withdraw, when true, gives up with errStopping once
// the run is stopping (the row has changed nothing yet and is not tried).
func (p *pacer) admit(ctx context.Context, withdraw bool) (call, error) {
	select {
	case <-ctx.Done():
		return call{}, ctx.Err()
	case p.calls <- struct{}{}:
	}
	lim := p.pace.Limiter
	for {
		if withdraw && p.stopping.Load() {
			<-p.calls
			return call{}, errStopping
		}
		ended := p.endedCh()
		if !p.pace.Yield || lim == nil || lim.InFlight() < lim.Limit() || lim.InFlight() == 0 {
			permit, err := lim.Acquire()
			if err == nil {
				permit.Sending() // the caller calls at once
				return call{p: p, permit: permit}, nil
			}
			if !errors.Is(err, admit.ErrShed) {
				<-p.calls
				return call{}, err
			}
		}
		t := time.NewTimer(retryAdmit)
		select {
		case <-ctx.Done():
			t.Stop()
			<-p.calls
			return call{}, ctx.Err()
		case <-ended:
		case <-t.C:
		}
		t.Stop()
	}
}

// call is one admitted core call.
type call struct {
	p      *pacer
	permit admit.Permit
}

// done ends the call, telling the limiter what it showed of the core.
func (c call) done(s admit.Sample, took time.Duration) {
	if c.p == nil {
		return
	}
	c.permit.Done(s, took)
	<-c.p.calls
	c.p.callEnded()
}

// lookupSample is what a lookup says about the core's latency: an answer
// (200 or 404) counts; a timeout counts as the whole timeout; any other
// failure says nothing the limiter can use.
func lookupSample(err error, took time.Duration) admit.Sample {
	switch {
	case err == nil, errors.Is(err, corecall.ErrUnusableAnswer):
		return admit.Answered
	case errors.Is(err, context.DeadlineExceeded):
		return admit.TimedOut
	}
	return admit.Ignored
}

// callSample is what a resend says about the core's latency, as the relay
// counts a frame's call.
func callSample(res corecall.Result) admit.Sample {
	switch {
	case errors.Is(res.Err, context.DeadlineExceeded):
		return admit.TimedOut
	case res.Source == generated.SourceConnectFail:
		return admit.Ignored
	}
	return admit.Answered
}

// runScans scans each selection in first-claim order (oldest first) and
// hands every row handle selects to the pacer. A row is yielded once
// (ledger.Filter.ByFirstClaim), so no set of the rows seen is kept: one
// page in memory however large the selection. It returns when every row
// begun has ended, with the first error that stopped the run.
func runScans(ctx context.Context, l *ledger.Ledger, p *pacer, selections []ledger.Filter, handle func(ledger.Row)) error {
	for _, f := range selections {
		f.ByFirstClaim = true
		err := l.Scan(ctx, f, func(row ledger.Row) error {
			return p.begin(ctx, func() { handle(row) })
		})
		switch {
		case errors.Is(err, errStopping):
		case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
			p.stop(err)
		case err != nil:
			p.stop(fmt.Errorf("select rows: %w", err))
		}
		if p.stopping.Load() {
			break
		}
	}
	return p.wait()
}

// Progress is what a run reports as it goes (a terminal's status line).
type Progress struct {
	// Done is the rows handled so far; Total how many the selection held
	// when the run started (rows that arrive meanwhile can make Done
	// larger).
	Done, Total int
	// Summary counts the rows by outcome so far.
	Summary *Summary
	// Final: the run has ended.
	Final bool
}

// progress counts handled rows and reports them, one report at a time in
// order.
type progress struct {
	mu    sync.Mutex
	fn    func(Progress)
	total int
	done  int
	s     *Summary
}

func (pr *progress) row() {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.done++
	if pr.fn != nil {
		pr.fn(Progress{Done: pr.done, Total: pr.total, Summary: pr.s})
	}
}

func (pr *progress) end() {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.fn != nil {
		pr.fn(Progress{Done: pr.done, Total: pr.total, Summary: pr.s, Final: true})
	}
}
