package coresim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Fault is a way the core misbehaves for one request, armed by Arm. Faults
// exist for cmd/verify, which drives them through cmd/coresim's --control
// listener; the core's own API (SPEC §3) never arms one.
type Fault string

// The faults. Those named "posted" post the transfer before misbehaving, so
// that the caller cannot know it was posted; the others post nothing.
const (
	// FaultDelay waits the armed delay (not watching the caller), then
	// answers as usual: a latency spike, or slow-then-post when the delay
	// is longer than the relay's timeout.
	FaultDelay Fault = "delay"
	// Fault500 answers 500 and posts nothing.
	Fault500 Fault = "500"
	// Fault504Posted posts, then answers 504 as a gateway that gave up.
	Fault504Posted Fault = "504-posted"
	// FaultResetPosted posts, then resets the connection unanswered.
	FaultResetPosted Fault = "reset-posted"
	// FaultResetUnposted reads the request, then resets the connection
	// without posting.
	FaultResetUnposted Fault = "reset-unposted"
	// FaultGarbledPosted posts, then answers 200 with half of its body.
	FaultGarbledPosted Fault = "garbled-posted"
	// FaultOtherGUIDPosted posts, then answers 200 about another GUID and
	// another transfer (its txId and balance differ).
	FaultOtherGUIDPosted Fault = "other-guid-posted"
	// FaultHang reads the request and answers nothing, posting nothing,
	// until the caller goes away.
	FaultHang Fault = "hang"
	// FaultLookupOtherGUID answers a lookup (GET /v1/transfers/{guid}) with
	// a 200 about another GUID and another transfer.
	FaultLookupOtherGUID Fault = "lookup-other-guid"
)

// Faults lists every fault, transfer faults first.
var Faults = []Fault{FaultDelay, Fault500, Fault504Posted, FaultResetPosted, FaultResetUnposted,
	FaultGarbledPosted, FaultOtherGUIDPosted, FaultHang, FaultLookupOtherGUID}

// forLookup reports whether f applies to lookups rather than to transfers.
func (f Fault) forLookup() bool { return f == FaultLookupOtherGUID }

// ParseFault returns the fault named s.
func ParseFault(s string) (Fault, error) {
	for _, f := range Faults {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("unknown fault %q (known: %v)", s, Faults)
}

// armed is one fault for the next n requests of its kind.
type armed struct {
	fault Fault
	n     int
	delay time.Duration
}

// faultQueue holds the armed faults, oldest first, per kind of request.
type faultQueue struct {
	mu       sync.Mutex
	transfer []armed
	lookup   []armed
}

// Arm makes the next n transfers (or lookups, for a lookup fault) show
// fault f; delay is FaultDelay's wait. Armed faults are used in the order
// they were armed.
func (s *Server) Arm(f Fault, n int, delay time.Duration) {
	q := &s.faults
	q.mu.Lock()
	defer q.mu.Unlock()
	a := armed{fault: f, n: n, delay: delay}
	if f.forLookup() {
		q.lookup = append(q.lookup, a)
	} else {
		q.transfer = append(q.transfer, a)
	}
}

// Disarm drops every armed fault.
func (s *Server) Disarm() {
	s.faults.mu.Lock()
	s.faults.transfer, s.faults.lookup = nil, nil
	s.faults.mu.Unlock()
}

// take returns the fault for this request, if any, and spends it.
func (q *faultQueue) take(lookup bool) armed {
	q.mu.Lock()
	defer q.mu.Unlock()
	list := &q.transfer
	if lookup {
		list = &q.lookup
	}
	if len(*list) == 0 {
		return armed{}
	}
	a := (*list)[0]
	(*list)[0].n--
	if (*list)[0].n <= 0 {
		*list = (*list)[1:]
	}
	return a
}

// Armed is how many transfers and lookups the armed faults are still
// for (the control's GET /armed): a fault armed for the next transfer is
// spent once one reaches the core.
type Armed struct {
	Transfers int `json:"transfers"`
	Lookups   int `json:"lookups"`
}

// Armed returns what the armed faults are still for.
func (s *Server) Armed() Armed {
	q := &s.faults
	q.mu.Lock()
	defer q.mu.Unlock()
	var n Armed
	for _, a := range q.transfer {
		n.Transfers += a.n
	}
	for _, a := range q.lookup {
		n.Lookups += a.n
	}
	return n
}

// InFlight is how many requests the core is handling right now: cmd/verify
// waits for none before it settles, so that no late posting follows a
// lookup.
func (s *Server) InFlight() int64 { return s.inflight.Load() }

// reset cuts the request's connection without an answer (a TCP reset).
func reset(w http.ResponseWriter) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // net/http closes the connection
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// hangTimeout bounds FaultHang when the caller never goes away.
const hangTimeout = time.Minute

// ControlHandler serves the fault controls on a listener of their own
// (cmd/coresim --control), apart from the core's API:
//
//	POST /arm?fault=NAME&n=N&delay=SECONDS  arm a fault for the next N requests
//	POST /disarm                            drop every armed fault, and the service time
//	GET  /armed                             {"transfers":N,"lookups":M} the armed faults are still for
//	GET  /inflight                          requests being handled now
//	GET  /inflight?guid=GUID                POSTs of GUID being handled now (needs the truth log)
//	POST /service?each=SECONDS&for=SECONDS  every request takes that long for a while
//	                                        (with Config.MaxConcurrent: a core at its capacity)
//
// refuse, when not nil, serves POST /refuse?for=SECONDS: the core stops
// accepting connections for that long (a refused connection is what the
// relay must answer E902).
func (s *Server) ControlHandler(refuse func(time.Duration) error) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /arm", func(w http.ResponseWriter, r *http.Request) {
		f, err := ParseFault(r.FormValue("fault"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n := 1
		if v := r.FormValue("n"); v != "" {
			if _, err := fmt.Sscan(v, &n); err != nil || n < 1 {
				http.Error(w, "n: want a positive count", http.StatusBadRequest)
				return
			}
		}
		var delay time.Duration
		if v := r.FormValue("delay"); v != "" {
			if delay, err = time.ParseDuration(v); err != nil {
				http.Error(w, "delay: "+err.Error(), http.StatusBadRequest)
				return
			}
		}
		s.Arm(f, n, delay)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /disarm", func(w http.ResponseWriter, _ *http.Request) {
		s.Disarm()
		s.SetService(0)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /armed", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(s.Armed())
	})
	mux.HandleFunc("GET /inflight", func(w http.ResponseWriter, r *http.Request) {
		if g := r.FormValue("guid"); g != "" {
			if s.truth == nil {
				http.Error(w, "guid: needs the truth log", http.StatusBadRequest)
				return
			}
			_ = json.NewEncoder(w).Encode(s.truth.postsOf(g))
			return
		}
		_ = json.NewEncoder(w).Encode(s.InFlight())
	})
	mux.HandleFunc("POST /service", func(w http.ResponseWriter, r *http.Request) {
		each, err1 := time.ParseDuration(r.FormValue("each"))
		d, err2 := time.ParseDuration(r.FormValue("for"))
		if err := errors.Join(err1, err2); err != nil || each < 0 || d <= 0 {
			http.Error(w, fmt.Sprintf("want each=DURATION and for=DURATION: %v", err), http.StatusBadRequest)
			return
		}
		s.SetService(each)
		time.AfterFunc(d, func() { s.SetService(0) })
		w.WriteHeader(http.StatusNoContent)
	})
	if refuse != nil {
		mux.HandleFunc("POST /refuse", func(w http.ResponseWriter, r *http.Request) {
			d, err := time.ParseDuration(r.FormValue("for"))
			if err != nil {
				http.Error(w, "for: "+err.Error(), http.StatusBadRequest)
				return
			}
			if err := refuse(d); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
	}
	return mux
}

// truthLog writes the core's ground truth, one JSON object a line, each
// written whole before the request is answered:
//
//	{"at":"…","ev":"arrive","guid":"…","fault":"…"}                 a POST /v1/transfers arrived
//	{"at":"…","ev":"posted","guid":"…","request":{…},"answer":{…}}  a transfer was posted
//	{"at":"…","ev":"lookup","guid":"…","status":200,"answer":{…}}   a lookup was answered
//
// A lookup answered while a POST of the same GUID is still being handled
// says so ("during_post":true): it came too early to be the truth.
type truthLog struct {
	mu sync.Mutex
	w  io.Writer

	postsMu sync.Mutex
	posts   map[string]int // POSTs being handled, by GUID
}

// posting counts a POST of guid in (d = 1) or out (d = -1).
func (l *truthLog) posting(guid string, d int) {
	l.postsMu.Lock()
	defer l.postsMu.Unlock()
	if l.posts == nil {
		l.posts = map[string]int{}
	}
	if l.posts[guid] += d; l.posts[guid] <= 0 {
		delete(l.posts, guid)
	}
}

// postingNow reports whether a POST of guid is being handled.
func (l *truthLog) postingNow(guid string) bool { return l.postsOf(guid) > 0 }

// postsOf is how many POSTs of guid are being handled.
func (l *truthLog) postsOf(guid string) int {
	l.postsMu.Lock()
	defer l.postsMu.Unlock()
	return l.posts[guid]
}

// TruthEvent is one line of the truth log.
type TruthEvent struct {
	At      time.Time       `json:"at"`
	Ev      string          `json:"ev"`
	GUID    string          `json:"guid"`
	Fault   Fault           `json:"fault,omitempty"`
	Status  int             `json:"status,omitempty"`
	Request json.RawMessage `json:"request,omitempty"`
	Answer  json.RawMessage `json:"answer,omitempty"`
	// DuringPost (a lookup): a POST of the same GUID was still being
	// handled, so the lookup's answer may be overtaken by a posting.
	DuringPost bool `json:"during_post,omitempty"`
}

// The events of the truth log.
const (
	TruthArrive = "arrive"
	TruthPosted = "posted"
	TruthLookup = "lookup"
)

func (l *truthLog) write(e TruthEvent) {
	if l == nil {
		return
	}
	b, _ := json.Marshal(e)
	b = append(b, '\n')
	l.mu.Lock()
	_, _ = l.w.Write(b)
	l.mu.Unlock()
}
