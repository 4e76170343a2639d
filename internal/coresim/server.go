package coresim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults applied by New to a zero Config field.
const (
	DefaultDelay = 3 * time.Second
	DefaultLimit = 10_000_000
)

// The memo prefixes that steer a transfer (SPEC §8), for a demo or a test
// that wants one on purpose.
const (
	// MemoFail: answered 500, nothing posted.
	MemoFail = "FAIL"
	// MemoSlow: posted after Config.Delay, whether or not the caller waits.
	MemoSlow = "SLOW"
)

// Config configures a Server. The zero value is the simulator of SPEC §8.
type Config struct {
	// Delay is how long a transfer whose memo starts with "SLOW" waits before
	// posting. Zero means DefaultDelay; a negative value means no wait.
	Delay time.Duration
	// Limit is the largest amount one transfer may move. Zero or negative
	// means DefaultLimit.
	Limit int64
	// Accounts are the accounts the core starts with. Nil means
	// DefaultAccounts(); an empty non-nil slice means none. If a bank and
	// account appear twice, the later one wins (LoadAccounts refuses that).
	Accounts []Account
	// Log, if not nil, receives one line per request (see New).
	Log io.Writer
	// Truth, if not nil, receives the core's ground truth: every transfer
	// that arrived, every posting and every lookup answered, as JSON lines
	// (see TruthEvent). cmd/verify checks the relay's answers against it.
	Truth io.Writer
	// Now is the core's clock, used for postedAt, asOf and the log's time
	// stamps. Nil means time.Now.
	Now func() time.Time
	// MaxConcurrent, when above zero, is how many requests to /v1/ the core
	// serves at once (SPEC §8, --max-concurrent); the rest queue, first
	// come first served, and are served in their turn even if their caller
	// has gone, as a real core that has received a request does. Zero
	// means no bound.
	MaxConcurrent int
	// RefuseBeyond makes a core at MaxConcurrent refuse a request that
	// finds no free place instead of queueing it: 503 with a Retry-After
	// and nothing posted, as a core (or its gateway) that sheds load
	// answers (--refuse-beyond).
	RefuseBeyond bool
	// Service is how long each request to /v1/ takes while it holds its
	// place (a core's own work), so that MaxConcurrent / Service is the
	// core's capacity. SetService changes it while serving.
	Service time.Duration
	// Arrived, if not nil, is called with each request to /v1/ as it
	// reaches the core, before it waits for its turn or is served: how a
	// test notices that a call reached the core, and holds it there by not
	// returning (testkit.Gate). A request whose caller has gone by then is
	// not served.
	Arrived func(*http.Request)
}

// Stats are the statistics served by GET /_stats.
type Stats struct {
	Calls  int            `json:"calls"`   // POST /v1/transfers received
	ByGUID map[string]int `json:"by_guid"` // the same, per X-GUID
}

// Server is the simulated core. It is an http.Handler and is safe for
// concurrent use.
type Server struct {
	delay time.Duration
	limit int64
	now   func() time.Time
	mux   *http.ServeMux
	// arrived is Config.Arrived.
	arrived func(*http.Request)
	log     *requestLog // nil: no request log
	truth   *truthLog   // nil: no truth log

	faults   faultQueue
	inflight atomic.Int64

	// gate holds one token per request being served when MaxConcurrent is
	// set; nil: no bound.
	gate    chan struct{}
	refuse  bool         // Config.RefuseBeyond
	service atomic.Int64 // nanoseconds each /v1/ request takes
	refused atomic.Int64 // requests answered 503 by RefuseBeyond

	// mu guards the books: balances, postings, the transaction counter and
	// the wait channel. Check-and-debit happens entirely under it.
	mu       sync.Mutex
	accounts map[acctKey]*int64
	postings map[string]posting // by GUID
	txSeq    uint64
	// postedCh, when not nil, is closed at the next posting to wake
	// WaitPosted callers. It is created only when someone waits, so that the
	// hot path allocates nothing for it.
	postedCh chan struct{}

	statsMu sync.Mutex // guards calls and byGUID
	calls   int
	byGUID  map[string]int
}

type acctKey struct{ bank, acct string }

// posting is what the core remembers of the transfers posted under one GUID:
// the first one's answer (for GET /v1/transfers/{guid}) and how many there were.
type posting struct {
	txSeq    uint64
	balance  int64
	postedAt [14]byte
	count    int
}

// New returns a Server for cfg.
//
// If cfg.Log is set, every request writes one line to it, once the response
// is complete:
//
//	2026-11-29T10:30:00.123+09:00 POST /v1/transfers 0123456789abcdef0123456789abcdef 200 1.234ms
//
// that is: the time the request arrived (cfg.Now, RFC 3339 with milliseconds),
// method, escaped path, GUID (the X-GUID header, else the {guid} of the path,
// else "-"; bytes outside printable ASCII and spaces shown as '?'), HTTP status,
// and the time spent in milliseconds. Lines are buffered and flushed as soon as
// no other request is waiting to log, so a busy server writes in batches and an
// idle one immediately. Write errors are ignored: the log must not fail a
// transfer.
func New(cfg Config) *Server {
	s := &Server{
		delay:    cfg.Delay,
		limit:    cfg.Limit,
		now:      cfg.Now,
		accounts: map[acctKey]*int64{},
		postings: map[string]posting{},
		byGUID:   map[string]int{},
	}
	if s.delay == 0 {
		s.delay = DefaultDelay
	}
	if s.limit <= 0 {
		s.limit = DefaultLimit
	}
	if s.now == nil {
		s.now = time.Now
	}
	accts := cfg.Accounts
	if accts == nil {
		accts = DefaultAccounts()
	}
	for _, a := range accts {
		bal := a.Balance
		s.accounts[acctKey{a.Bank, a.Acct}] = &bal
	}
	if cfg.Log != nil {
		s.log = newRequestLog(cfg.Log)
	}
	if cfg.MaxConcurrent > 0 {
		s.gate = make(chan struct{}, cfg.MaxConcurrent)
		s.refuse = cfg.RefuseBeyond
	}
	s.service.Store(int64(cfg.Service))
	if cfg.Truth != nil {
		s.truth = &truthLog{w: cfg.Truth}
	}
	s.arrived = cfg.Arrived

	s.mux = http.NewServeMux()
	s.mux.HandleFunc(routePostTransfer, s.postTransfer)
	s.mux.HandleFunc("GET /v1/transfers/{guid}", s.getTransfer)
	s.mux.HandleFunc("GET /v1/accounts/{bank}/{acct}", s.getAccount)
	s.mux.HandleFunc("GET /_stats", s.getStats)
	s.mux.HandleFunc("POST /_reset", s.postReset)
	return s
}

// routePostTransfer is the one route whose calls _stats counts, refused or
// served.
const routePostTransfer = "POST /v1/transfers"

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		if s.arrived != nil {
			if s.arrived(r); r.Context().Err() != nil {
				return // held at the door until its caller left: never served
			}
		}
		if !s.serveInTurn() {
			if r.Method+" "+r.URL.Path == routePostTransfer {
				s.count(r.Header.Get(headerGUID)) // a call the relay made, refused
			}
			s.refused.Add(1)
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "at capacity")
			return
		}
	}
	if s.log == nil {
		s.mux.ServeHTTP(w, r)
		return
	}
	s.serveLogged(w, r)
}

// serveInTurn waits for a place among MaxConcurrent (deliberately not
// watching the caller's context: a queued request is served in its turn)
// and spends the service time in it. The handler then runs after the
// place is given back; its own work is microseconds. With RefuseBeyond a
// request that finds no place is not served: serveInTurn returns false.
func (s *Server) serveInTurn() bool {
	if s.gate != nil {
		if s.refuse {
			select {
			case s.gate <- struct{}{}:
			default:
				return false
			}
		} else {
			s.gate <- struct{}{}
		}
		defer func() { <-s.gate }()
	}
	if d := time.Duration(s.service.Load()); d > 0 {
		time.Sleep(d)
	}
	return true
}

// Serving is how many requests hold one of MaxConcurrent's places now.
func (s *Server) Serving() int { return len(s.gate) }

// Refused is how many requests RefuseBeyond answered 503.
func (s *Server) Refused() int64 { return s.refused.Load() }

// SetService changes how long each request to /v1/ takes from now on (a
// core whose latency rises for a while).
func (s *Server) SetService(d time.Duration) { s.service.Store(int64(d)) }

// Stats returns a copy of the statistics.
func (s *Server) Stats() Stats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	st := Stats{Calls: s.calls, ByGUID: make(map[string]int, len(s.byGUID))}
	for g, n := range s.byGUID {
		st.ByGUID[g] = n
	}
	return st
}

// Reset zeroes the statistics, as POST /_reset does. Balances and posted
// transfers are kept.
func (s *Server) Reset() {
	s.statsMu.Lock()
	s.calls = 0
	clear(s.byGUID)
	s.statsMu.Unlock()
}

// Balance returns the balance of an account and whether it exists.
func (s *Server) Balance(bank, acct string) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.accounts[acctKey{bank, acct}]
	if !ok {
		return 0, false
	}
	return *p, true
}

// Posted reports whether at least one transfer with this GUID was posted
// (answered, or would have been answered, 200).
func (s *Server) Posted(guid string) bool {
	return s.PostCount(guid) > 0
}

// PostCount returns how many transfers with this GUID were posted. Unlike
// Stats().ByGUID it leaves out calls that were refused (400, 422, 500).
func (s *Server) PostCount(guid string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.postings[guid].count
}

// WaitPosted blocks until a transfer with this GUID has been posted or ctx is
// done, and returns ctx.Err() in the latter case. Tests use it to wait for a
// SLOW transfer whose caller has already given up, without sleeping.
func (s *Server) WaitPosted(ctx context.Context, guid string) error {
	for {
		s.mu.Lock()
		if s.postings[guid].count > 0 {
			s.mu.Unlock()
			return nil
		}
		if s.postedCh == nil {
			s.postedCh = make(chan struct{})
		}
		ch := s.postedCh
		s.mu.Unlock()

		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// transferRequest is the body of POST /v1/transfers. Amount is kept raw so that
// it can be checked to be an integer literal: json.Number would also accept the
// string "100", and float64 would accept 1.5 and 1e3.
type transferRequest struct {
	GUID   string          `json:"guid"`
	WdBank string          `json:"wdBank"`
	WdAcct string          `json:"wdAcct"`
	DpBank string          `json:"dpBank"`
	DpAcct string          `json:"dpAcct"`
	Amount json.RawMessage `json:"amount"`
	Memo   string          `json:"memo"`
}

// headerGUID is X-GUID in canonical form, which spares Header.Get an
// allocation to canonicalize it on every request.
const headerGUID = "X-Guid"

// maxBody bounds a transfer body; a real one is under 300 bytes.
const maxBody = 64 << 10

// Results of a refused transfer (422), as the relay expects them (SPEC §3).
const (
	resultNoAccount         = "NO_ACCOUNT"
	resultLimitExceeded     = "LIMIT_EXCEEDED"
	resultInsufficientFunds = "INSUFFICIENT_FUNDS"
)

func (s *Server) postTransfer(w http.ResponseWriter, r *http.Request) {
	hdrGUID := r.Header.Get(headerGUID)
	s.count(hdrGUID)
	f := s.faults.take(false)
	if s.truth != nil {
		s.truth.write(TruthEvent{At: time.Now(), Ev: TruthArrive, GUID: hdrGUID, Fault: f.fault})
		s.truth.posting(hdrGUID, 1)
		defer s.truth.posting(hdrGUID, -1)
	}

	req, amount, raw, msg := decodeTransfer(r, hdrGUID)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	switch f.fault {
	case Fault500:
		writeError(w, http.StatusInternalServerError, "simulated core failure (armed)")
		return
	case FaultResetUnposted:
		reset(w)
		return
	case FaultHang:
		select {
		case <-r.Context().Done():
		case <-time.After(hangTimeout):
		}
		return
	case FaultDelay:
		time.Sleep(f.delay) // not watching the caller: see SLOW below
	}
	if strings.HasPrefix(req.Memo, MemoFail) {
		writeError(w, http.StatusInternalServerError, "simulated core failure (memo FAIL)")
		return
	}
	if strings.HasPrefix(req.Memo, MemoSlow) && s.delay > 0 {
		// Deliberately not watching r.Context(): a real core that has the
		// request keeps going when the caller hangs up, and that is exactly the
		// case (E901, settle by inquiry) this memo exists to produce.
		time.Sleep(s.delay)
	}

	p, result := s.post(&req, amount)
	if result != "" {
		b := make([]byte, 0, 96)
		b = append(b, `{"guid":"`...)
		b = append(b, req.GUID...) // validated hex: nothing to escape
		b = append(b, `","result":"`...)
		b = append(b, result...)
		b = append(b, `"}`...)
		writeJSON(w, http.StatusUnprocessableEntity, b)
		return
	}
	// After a SLOW wait the caller may be gone; the write then fails, which
	// is fine: the transfer is posted either way.
	answer := appendPosting(make([]byte, 0, 128), req.GUID, p)
	if s.truth != nil {
		s.truth.write(TruthEvent{At: time.Now(), Ev: TruthPosted, GUID: req.GUID, Request: raw, Answer: answer})
	}
	switch f.fault {
	case Fault504Posted:
		writeError(w, http.StatusGatewayTimeout, "simulated gateway timeout (armed)")
	case FaultResetPosted:
		reset(w)
	case FaultGarbledPosted:
		writeJSON(w, http.StatusOK, answer[:len(answer)/2])
	case FaultOtherGUIDPosted:
		writeJSON(w, http.StatusOK, appendPosting(make([]byte, 0, 128), otherGUID(req.GUID), otherPosting(p)))
	default:
		writeJSON(w, http.StatusOK, answer)
	}
}

// otherPosting is what a 200 about another transfer carries: not p's
// transaction id or balance, so that a caller that takes it for p's answer
// shows it.
func otherPosting(p posting) posting {
	p.txSeq += 1 << 40
	p.balance++
	return p
}

// otherGUID is a well-formed GUID that is not g.
func otherGUID(g string) string {
	b := []byte(g)
	if b[0] == '0' {
		b[0] = '1'
	} else {
		b[0] = '0'
	}
	return string(b)
}

// count records one POST /v1/transfers in the statistics.
func (s *Server) count(hdrGUID string) {
	s.statsMu.Lock()
	s.calls++
	if validGUID(hdrGUID) {
		s.byGUID[hdrGUID]++
	}
	s.statsMu.Unlock()
}

// decodeTransfer reads and checks a transfer request. It returns a non-empty
// message, for a 400, when the request is invalid.
func decodeTransfer(r *http.Request, hdrGUID string) (req transferRequest, amount int64, raw []byte, msg string) {
	raw, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return req, 0, nil, "request body over " + strconv.Itoa(maxBody) + " bytes"
		}
		return req, 0, nil, "reading the request: " + err.Error()
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, 0, nil, "invalid JSON: " + err.Error()
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, 0, nil, "invalid JSON: data after the object"
	}
	switch {
	case req.GUID == "":
		return req, 0, nil, "guid missing"
	case !validGUID(req.GUID):
		return req, 0, nil, "guid must be 32 lowercase hex digits"
	case hdrGUID == "":
		return req, 0, nil, "X-GUID header missing"
	case hdrGUID != req.GUID:
		return req, 0, nil, "X-GUID header differs from the body's guid"
	case req.WdBank == "":
		return req, 0, nil, "wdBank missing"
	case req.WdAcct == "":
		return req, 0, nil, "wdAcct missing"
	case req.DpBank == "":
		return req, 0, nil, "dpBank missing"
	case req.DpAcct == "":
		return req, 0, nil, "dpAcct missing"
	case len(req.Amount) == 0:
		return req, 0, nil, "amount missing"
	}
	amount, ok := parseIntLiteral(req.Amount)
	switch {
	case !ok:
		return req, 0, nil, "amount must be a JSON integer, got " + truncate(string(req.Amount), 40)
	case amount <= 0:
		return req, 0, nil, "amount must be > 0"
	}
	return req, amount, raw, ""
}

// parseIntLiteral accepts a JSON number written as an integer ("-?[0-9]+"; the
// decoder has already checked it is valid JSON) that fits an int64.
func parseIntLiteral(raw []byte) (int64, bool) {
	digits := raw
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || !allOf(string(digits), isDigit) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err == nil
}

// post applies the rules of SPEC §8 and, if they allow it, posts the
// transfer. It returns the posting, or the 422 result.
func (s *Server) post(req *transferRequest, amount int64) (posting, string) {
	s.mu.Lock()
	defer s.mu.Unlock()

	wd, ok := s.accounts[acctKey{req.WdBank, req.WdAcct}]
	switch {
	case !ok || req.WdBank != "LHB":
		return posting{}, resultNoAccount
	case amount > s.limit:
		return posting{}, resultLimitExceeded
	case amount > *wd:
		return posting{}, resultInsufficientFunds
	}
	*wd -= amount
	if req.DpBank == "LHB" {
		if dp, ok := s.accounts[acctKey{req.DpBank, req.DpAcct}]; ok {
			*dp += amount
		}
	}
	s.txSeq++
	p := posting{txSeq: s.txSeq, balance: *wd, count: 1}
	s.now().AppendFormat(p.postedAt[:0], stampLayout)

	if first, ok := s.postings[req.GUID]; ok {
		first.count++
		s.postings[req.GUID] = first
	} else {
		s.postings[req.GUID] = p
	}
	if s.postedCh != nil {
		close(s.postedCh)
		s.postedCh = nil
	}
	return p, ""
}

// stampLayout is the core's YYYYMMDDhhmmss time stamp.
const stampLayout = "20060102150405"

// appendPosting appends the 200 answer of a transfer:
// {"guid":…,"txId":…,"balance":…,"postedAt":…}. Every value is digits, hex or
// a fixed letter, so nothing needs escaping.
func appendPosting(b []byte, guid string, p posting) []byte {
	b = append(b, `{"guid":"`...)
	b = append(b, guid...)
	b = append(b, `","txId":"T`...)
	b = appendZeroPadded(b, p.txSeq, 15)
	b = append(b, `","balance":`...)
	b = strconv.AppendInt(b, p.balance, 10)
	b = append(b, `,"postedAt":"`...)
	b = append(b, p.postedAt[:]...)
	b = append(b, `"}`...)
	return b
}

func appendZeroPadded(b []byte, n uint64, width int) []byte {
	var tmp [20]byte
	d := strconv.AppendUint(tmp[:0], n, 10)
	for range width - len(d) {
		b = append(b, '0')
	}
	return append(b, d...)
}

func (s *Server) getTransfer(w http.ResponseWriter, r *http.Request) {
	guid := r.PathValue("guid")
	f := s.faults.take(true)
	s.mu.Lock()
	p, ok := s.postings[guid]
	s.mu.Unlock()
	status, answer := http.StatusOK, []byte(nil)
	switch {
	case f.fault == FaultLookupOtherGUID:
		// About another GUID, with this one's posting if there is one.
		if !ok {
			copy(p.postedAt[:], "20000101000000")
		}
		answer = appendPosting(make([]byte, 0, 128), otherGUID(guid), otherPosting(p))
	case ok:
		answer = appendPosting(make([]byte, 0, 128), guid, p)
	default:
		status = http.StatusNotFound
	}
	if s.truth != nil && validGUID(guid) {
		s.truth.write(TruthEvent{At: time.Now(), Ev: TruthLookup, GUID: guid, Fault: f.fault, Status: status, Answer: answer,
			DuringPost: s.truth.postingNow(guid)})
	}
	if status == http.StatusNotFound {
		writeError(w, http.StatusNotFound, "no transfer posted with this guid")
		return
	}
	writeJSON(w, http.StatusOK, answer)
}

type accountAnswer struct {
	Bank    string `json:"bank"`
	Acct    string `json:"acct"`
	Balance int64  `json:"balance"`
	AsOf    string `json:"asOf"`
}

func (s *Server) getAccount(w http.ResponseWriter, r *http.Request) {
	bank, acct := r.PathValue("bank"), r.PathValue("acct")
	s.mu.Lock()
	p, ok := s.accounts[acctKey{bank, acct}]
	var bal int64
	if ok {
		bal = *p
	}
	asOf := s.now().Format(stampLayout)
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "no such account")
		return
	}
	// bank and acct come from the URL and may hold anything: let
	// encoding/json escape them.
	b, _ := json.Marshal(accountAnswer{Bank: bank, Acct: acct, Balance: bal, AsOf: asOf})
	writeJSON(w, http.StatusOK, b)
}

func (s *Server) getStats(w http.ResponseWriter, _ *http.Request) {
	b, _ := json.Marshal(s.Stats())
	writeJSON(w, http.StatusOK, b)
}

func (s *Server) postReset(w http.ResponseWriter, _ *http.Request) {
	s.Reset()
	w.WriteHeader(http.StatusNoContent)
}

// jsonContentType is shared by every response to spare an allocation per
// request; net/http only reads it.
var jsonContentType = []string{"application/json"}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	writeJSON(w, status, b)
}

// validGUID reports whether g is 32 lowercase hex digits (SPEC §1).
func validGUID(g string) bool {
	if len(g) != 32 {
		return false
	}
	for i := 0; i < len(g); i++ {
		c := g[i]
		if !isDigit(c) && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
