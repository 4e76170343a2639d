package channel

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"lhrelay/internal/generated"
)

// DefaultProgressEvery is how often RunLoad reports progress when
// LoadConfig.ProgressEvery is zero.
const DefaultProgressEvery = 200 * time.Millisecond

// rateSlack is how far behind its schedule the rate limiter may fall and
// still catch up: a burst after a stall lasts at most this long (and at
// least one frame), so --rate stays a cap while timer granularity does not
// shave high rates.
const rateSlack = 10 * time.Millisecond

// LoadConfig describes a load run.
type LoadConfig struct {
	Addr   string
	Tx     string // generated.ClientDefault when empty
	SrcOrg string // generated.DefaultSrcOrg when empty
	DstOrg string // generated.DefaultDstOrg when empty
	// Fields are the body values every frame carries, by JSON key; the
	// layout's defaults fill the rest. A field the layout declares vary=
	// for and Fields does not set gets a random value in that range in
	// each frame.
	Fields map[string]string

	Count       int     // frames to send, at least 1
	Concurrency int     // persistent connections, at least 1 (no more than Count are opened)
	Rate        float64 // cap on frames per second over all connections; 0 = no cap
	// Duplicates is the percentage (0-100) of frames that reuse an earlier
	// frame's GUID and body, to exercise the ledger's replay.
	Duplicates float64
	// Timeout bounds each connect and each answer; DefaultTimeout when zero.
	Timeout time.Duration
	// TLS, when set, speaks TLS to the relay (see WithTLS).
	TLS *tls.Config
	// Seed makes the choice of varied values and duplicates repeatable; 0 picks
	// one at random. GUIDs are always fresh.
	Seed uint64

	// Progress, when set, is called from one goroutine about every
	// ProgressEvery, and once more when the run ends.
	Progress      func(Progress)
	ProgressEvery time.Duration
}

// Progress is a snapshot of a load run.
type Progress struct {
	Done    int // frames finished, answered or not
	Total   int
	Errors  int // frames finished without a valid answer
	Elapsed time.Duration
}

// Validate checks the configuration, including that the frames it describes
// can be built.
func (c LoadConfig) Validate() error {
	switch {
	case c.Addr == "":
		return errors.New("load: no relay address")
	case c.Count < 1:
		return fmt.Errorf("load: count %d: want at least 1", c.Count)
	case c.Concurrency < 1:
		return fmt.Errorf("load: concurrency %d: want at least 1", c.Concurrency)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("load: rate %v: want a number of frames per second >= 0", c.Rate)
	case !(c.Duplicates >= 0 && c.Duplicates <= 100):
		return fmt.Errorf("load: duplicates %v: want a percentage 0-100", c.Duplicates)
	case c.Timeout < 0:
		return fmt.Errorf("load: timeout %v: want >= 0", c.Timeout)
	}
	p, err := c.plan()
	if err != nil {
		return err
	}
	// Build one frame, with the largest varied values, to check the values.
	fields := p.fields
	for _, f := range p.vary {
		fields[f.JSON] = strconv.FormatInt(f.VaryMax, 10)
	}
	_, err = Request{Tx: p.tx.Code, GUID: NewGUID(), SrcOrg: c.SrcOrg, DstOrg: c.DstOrg, Fields: fields}.Frame(time.Now())
	return err
}

// loadPlan is what every frame of a run shares.
type loadPlan struct {
	tx     *generated.Transaction
	fields map[string]string
	vary   []generated.FieldSpec // the fields each frame draws a value for
}

func (c LoadConfig) plan() (loadPlan, error) {
	tx, err := LookupTx(c.Tx)
	if err != nil {
		return loadPlan{}, err
	}
	p := loadPlan{tx: tx, fields: WithDefaults(tx, c.Fields)}
	for _, f := range tx.RequestFields {
		if _, given := c.Fields[f.JSON]; f.Vary && !given {
			p.vary = append(p.vary, f)
		}
	}
	return p, nil
}

// frameSpec is what varies between the frames of a run.
type frameSpec struct {
	guid      string
	varied    []int64 // a value for each of loadPlan.vary
	duplicate bool
}

// specs picks each frame's GUID and varied values, and which frames are duplicates
// (exactly round(Count × Duplicates%) of them, never the first) and of which
// earlier frame.
func (c LoadConfig) specs(rng *rand.Rand, vary []generated.FieldSpec) []frameSpec {
	specs := make([]frameSpec, c.Count)
	dup := make([]bool, c.Count)
	k := min(int(math.Round(float64(c.Count)*c.Duplicates/100)), c.Count-1)
	for _, i := range rng.Perm(c.Count - 1)[:k] {
		dup[i+1] = true
	}
	for i := range specs {
		if dup[i] {
			specs[i] = specs[rng.IntN(i)]
			specs[i].duplicate = true
			continue
		}
		specs[i] = frameSpec{guid: NewGUID(), varied: make([]int64, len(vary))}
		for j, f := range vary {
			specs[i].varied[j] = f.VaryMin + rng.Int64N(f.VaryMax-f.VaryMin+1)
		}
	}
	return specs
}

// RunLoad sends cfg.Count frames over cfg.Concurrency persistent connections,
// each connection carrying one frame at a time (its answer is read before the
// next frame is written), and sums up the answers.
//
// It returns an error without sending anything when the configuration is
// invalid or a connection cannot be opened. A connection that fails during
// the run is counted against the frame it carried and dialled again for the
// next. When ctx ends, frames not yet sent are left out, frames in flight
// lose their answer, and RunLoad returns the summary so far with ctx's error.
func RunLoad(ctx context.Context, cfg LoadConfig) (Summary, error) {
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	p, err := cfg.plan()
	if err != nil {
		return Summary{}, err
	}
	seed := cfg.Seed
	if seed == 0 {
		var b [8]byte
		_, _ = crand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	specs := cfg.specs(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), p.vary)

	nconn := min(cfg.Concurrency, cfg.Count)
	conns := make([]*Conn, nconn)
	for i := range conns {
		if conns[i], err = Dial(ctx, cfg.Addr, cfg.Timeout, WithTLS(cfg.TLS)); err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return Summary{}, err
		}
	}

	r := &loadRun{cfg: cfg, plan: p, specs: specs, results: make([]Result, cfg.Count)}
	jobs := make(chan int)
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { r.work(ctx, c, jobs) })
	}
	stopProgress := r.reportProgress(start)
	r.dispatch(ctx, jobs, start)
	wg.Wait()
	elapsed := time.Since(start)
	stopProgress()

	s := Summarize(r.results, elapsed)
	s.Tx, s.Addr, s.Concurrency = p.tx.Code, cfg.Addr, nconn
	if err := ctx.Err(); err != nil {
		return s, fmt.Errorf("load run interrupted after %d of %d frames: %w", s.Answered, s.Frames, err)
	}
	return s, nil
}

// loadRun is the state of one RunLoad.
type loadRun struct {
	cfg     LoadConfig
	plan    loadPlan
	specs   []frameSpec
	results []Result // results[i] is written only by the worker that sent frame i
	done    atomic.Int64
	failed  atomic.Int64
}

// dispatch hands out frame numbers in order, paced to cfg.Rate, and closes
// jobs at the end or when ctx ends.
func (r *loadRun) dispatch(ctx context.Context, jobs chan<- int, start time.Time) {
	defer close(jobs)
	var interval time.Duration
	if r.cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) / r.cfg.Rate)
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	next := start
	for i := range r.specs {
		if interval > 0 {
			now := time.Now()
			if wait := next.Sub(now); wait > 0 {
				timer.Reset(wait)
				select {
				case <-ctx.Done():
					timer.Stop()
					return
				case <-timer.C:
				}
			} else if lag := max(rateSlack, interval); -wait > lag {
				next = now.Add(-lag) // forget the backlog beyond the slack
			}
			next = next.Add(interval)
		}
		select {
		case jobs <- i:
		case <-ctx.Done():
			return
		}
	}
}

// worker owns one connection of a run and the buffers it builds frames in.
type worker struct {
	r      *loadRun
	ctx    context.Context
	c      *Conn       // nil after a failure, until the next frame dials again
	stop   func() bool // unregisters the close-on-cancel of c
	fields map[string]string
	buf    []byte
}

// work sends the frames it is handed over its connection, dialling again
// after a failure.
func (r *loadRun) work(ctx context.Context, c *Conn, jobs <-chan int) {
	w := &worker{r: r, ctx: ctx, fields: maps.Clone(r.plan.fields)}
	w.adopt(c)
	defer w.drop()
	for i := range jobs {
		res := &r.results[i]
		res.Duplicate = r.specs[i].duplicate
		if ctx.Err() != nil {
			continue // not sent: the run is being cut short
		}
		w.send(r.specs[i], res)
		r.done.Add(1)
		if !res.Answered || res.Mismatch {
			r.failed.Add(1)
		}
	}
}

// adopt makes c the worker's connection, closed when the run's context ends
// so that a Send in progress returns at once.
func (w *worker) adopt(c *Conn) {
	w.c = c
	w.stop = context.AfterFunc(w.ctx, func() { c.Close() })
}

// drop closes the worker's connection, if any.
func (w *worker) drop() {
	if w.c != nil {
		w.stop()
		w.c.Close()
		w.c = nil
	}
}

// send sends one frame, dialling first if the connection was dropped, and
// records its result.
func (w *worker) send(spec frameSpec, res *Result) {
	r := w.r
	if w.c == nil {
		c, err := Dial(w.ctx, r.cfg.Addr, r.cfg.Timeout, WithTLS(r.cfg.TLS))
		if err != nil {
			res.Err = err
			return
		}
		w.adopt(c)
	}
	for j, f := range r.plan.vary {
		w.fields[f.JSON] = strconv.FormatInt(spec.varied[j], 10)
	}
	res.GUID = spec.guid
	req := Request{Tx: r.plan.tx.Code, GUID: spec.guid, SrcOrg: r.cfg.SrcOrg, DstOrg: r.cfg.DstOrg, Fields: w.fields}
	frame, err := req.AppendFrame(w.buf[:0], time.Now())
	if err != nil {
		res.Err = err
		return
	}
	w.buf = frame
	t0 := time.Now()
	ans, err := w.c.Send(frame)
	res.Latency = time.Since(t0)
	if err != nil {
		// Framing on this connection is lost: the next frame dials again.
		res.Sent = errors.Is(err, ErrNoAnswer) || errors.Is(err, ErrMalformed)
		res.Malformed = errors.Is(err, ErrMalformed)
		res.Err = fmt.Errorf("guid %s: %w", spec.guid, err)
		w.drop()
		return
	}
	res.Sent = true
	a, err := Decode(ans)
	if err != nil {
		res.Malformed = true
		res.Err = fmt.Errorf("guid %s: %w: %s", spec.guid, err, Quote(ans))
		return
	}
	res.Answered = true
	res.Code = a.Code
	if a.Header.GUID != spec.guid || a.Header.TxCode != r.plan.tx.Code {
		res.Mismatch = true
		res.Err = fmt.Errorf("mismatch: answer to %s %s names %s %s", r.plan.tx.Code, spec.guid, a.Header.TxCode, a.Header.GUID)
	}
}

// reportProgress calls cfg.Progress every ProgressEvery from one goroutine;
// the function it returns stops it and makes the final call.
func (r *loadRun) reportProgress(start time.Time) func() {
	if r.cfg.Progress == nil {
		return func() {}
	}
	every := r.cfg.ProgressEvery
	if every <= 0 {
		every = DefaultProgressEvery
	}
	snapshot := func() Progress {
		return Progress{Done: int(r.done.Load()), Total: len(r.specs), Errors: int(r.failed.Load()), Elapsed: time.Since(start)}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				r.cfg.Progress(snapshot())
			}
		}
	})
	return func() {
		close(quit)
		wg.Wait()
		r.cfg.Progress(snapshot())
	}
}
