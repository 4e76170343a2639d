package console

import (
	"context"
	"time"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

// Overview is the ledger at a glance, as one refresh read it.
type Overview struct {
	ledger.StateCounts
	// StaleSent counts the SENT rows older than Config.StaleSent;
	// Resend the FAILED/E902 rows reprocess will send again (fewer
	// attempts than Config.MaxAttempts); OutOfAttempts those it will not.
	StaleSent, Resend, OutOfAttempts int64
	// Read is when this process read them, Took how long it took.
	Read time.Time
	Took time.Duration
	// Next is how long until the next read.
	Next time.Duration
	Err  string // the last refresh's error; the counts are the last good ones
}

// AuditResult is the last audit the console ran.
type AuditResult struct {
	Ran     bool // at least one audit finished
	Running bool
	Started time.Time
	Took    time.Duration
	OK      bool
	Err     string // the break found (or the error met)
	Summary ledger.AuditSummary
}

// failedNotSent is the filter of the FAILED rows that were never sent:
// reprocess's.
func failedNotSent() ledger.Filter {
	return ledger.Filter{States: []ledger.State{ledger.StateFailed}, RspCode: string(generated.RspConnectFail)}
}

// readOverview reads the counts of the overview.
func (s *Server) readOverview(ctx context.Context) (*Overview, error) {
	start := time.Now()
	st, err := s.l.Stats(ctx)
	if err != nil {
		return nil, err
	}
	o := &Overview{StateCounts: st, Read: start}
	stale := ledger.Filter{States: []ledger.State{ledger.StateSent}, OlderThan: s.cfg.StaleSent}
	resend := failedNotSent()
	resend.MaxAttempts = s.cfg.MaxAttempts
	out := failedNotSent()
	out.MinAttempts = s.cfg.MaxAttempts
	for _, c := range []struct {
		f   ledger.Filter
		dst *int64
	}{{stale, &o.StaleSent}, {resend, &o.Resend}, {out, &o.OutOfAttempts}} {
		n, err := s.l.Count(ctx, c.f)
		if err != nil {
			return nil, err
		}
		*c.dst = int64(n)
	}
	o.Took = time.Since(start)
	return o, nil
}

// refreshLoop reads the overview at start and every Refresh, or ten
// times as long as the last read took if that is longer: on a ledger of
// millions of rows a read takes a second of the database's time, and the
// console must not take more than a tenth of it.
func (s *Server) refreshLoop(ctx context.Context) {
	defer s.done.Done()
	for {
		o, err := s.readOverview(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := s.cfg.Refresh
		s.mu.Lock()
		switch {
		case err != nil && s.overview != nil:
			kept := *s.overview
			kept.Err = err.Error()
			s.overview = &kept
		case err != nil:
			s.overview = &Overview{Read: time.Now(), Err: err.Error()}
		default:
			s.overview = o
			wait = max(wait, 10*o.Took)
		}
		s.overview.Next = wait
		if err != nil {
			s.log.Error("console: reading the overview", "err", err)
		}
		close(s.fresh)
		s.fresh = make(chan struct{})
		s.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// currentOverview is the last overview read, waiting for the first one
// (or ctx) at start.
func (s *Server) currentOverview(ctx context.Context) (*Overview, AuditResult) {
	for {
		s.mu.Lock()
		o, a, fresh := s.overview, s.audit, s.fresh
		s.mu.Unlock()
		if o != nil {
			return o, a
		}
		select {
		case <-fresh:
		case <-ctx.Done():
			return &Overview{Read: time.Now(), Err: "not read yet"}, a
		}
	}
}

// auditLoop audits the whole history at start and every AuditEvery (0:
// at start only).
func (s *Server) auditLoop(ctx context.Context) {
	defer s.done.Done()
	for {
		start := time.Now()
		s.mu.Lock()
		s.audit.Running, s.audit.Started = true, start
		s.mu.Unlock()
		sum, err := s.l.Audit(ctx)
		if ctx.Err() != nil {
			return
		}
		res := AuditResult{Ran: true, Started: start, Took: time.Since(start), OK: err == nil, Summary: sum}
		if err != nil {
			res.Err = err.Error()
			s.log.Error("console: audit found the history broken", "err", err)
		}
		s.mu.Lock()
		s.audit = res
		s.mu.Unlock()
		if s.cfg.AuditEvery == 0 {
			return
		}
		t := time.NewTimer(s.cfg.AuditEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
