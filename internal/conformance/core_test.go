package conformance

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
)

// core is a core banking system for one case, serving SPEC §3's shape for
// every registered transaction: its call (method and path template) and,
// for one settled by lookup, its lookup GET. It is programmed per GUID
// (X-GUID): what each call about that GUID answers, in order, and whether
// the core posted it. Its 404s are a framework's: JSON naming what was not
// found, an unknown transfer `{"error":"no such transfer"}`, a path no
// route serves `{"error":"no such path"}`.
type core struct {
	srv  *httptest.Server
	stop chan struct{} // closed at the end of the test: held calls return

	mu       sync.Mutex
	script   map[string][]answer      // by GUID: the answers to its next calls
	posted   map[string]bool          // by GUID: the core posted it
	calls    map[string][]call        // by GUID: the transaction calls that reached the core
	lookups  map[string]int           // by GUID: the lookups of it
	requests int                      // every request, whatever its path
	releases map[string]chan struct{} // by GUID: closed to let its held call answer
	arrived  chan string              // the GUIDs of held calls, as they arrive
}

// call is a transaction call as the core received it.
type call struct {
	method, path, contentType string
	body                      []byte
}

// hold says whether an answer waits before it is given.
type hold int

const (
	noHold        hold = iota
	untilGone          // until the caller gives up: the answer never comes
	untilReleased      // until the test opens it (core.open)
)

// answer is what the core does with one call.
type answer struct {
	// posts: the core posts the request (its lookup then answers 200),
	// as it arrives.
	posts  bool
	hold   hold
	status int
	// body is the JSON answered for the request of tx with GUID guid.
	body func(tx *generated.Transaction, guid string) string
}

// posting is the default answer, given once a GUID's script has run out:
// posted, 200 with the transaction's response.
var posting = answer{posts: true, status: http.StatusOK, body: okJSON}

// route is one path the core serves.
type route struct {
	tx       *generated.Transaction
	method   string
	segments []string // "{name}" matches any one segment
	lookup   bool
}

func newCore(t *testing.T) *core {
	c := &core{
		stop:     make(chan struct{}),
		script:   map[string][]answer{},
		posted:   map[string]bool{},
		calls:    map[string][]call{},
		lookups:  map[string]int{},
		releases: map[string]chan struct{}{},
		arrived:  make(chan string, 4),
	}
	var routes []route
	for _, tx := range generated.Transactions() {
		routes = append(routes, route{tx: tx, method: tx.Method, segments: strings.Split(tx.Path, "/")})
		if tx.Settle == generated.SettleByLookup {
			routes = append(routes, route{tx: tx, method: http.MethodGet, segments: strings.Split(tx.LookupPath, "/"), lookup: true})
		}
	}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.requests++
		c.mu.Unlock()
		for _, rt := range routes {
			if vars, ok := rt.match(r); ok {
				if rt.lookup {
					c.serveLookup(w, rt.tx, lookupGUID(vars, r))
				} else {
					c.serveCall(w, r, rt.tx, body)
				}
				return
			}
		}
		writeJSON(w, http.StatusNotFound, `{"error":"no such path"}`)
	}))
	t.Cleanup(func() {
		close(c.stop)
		c.srv.Close()
	})
	return c
}

// match reports whether r is a request for rt, with the values of its
// template's variables.
func (rt route) match(r *http.Request) (map[string]string, bool) {
	if r.Method != rt.method {
		return nil, false
	}
	got := strings.Split(r.URL.Path, "/")
	if len(got) != len(rt.segments) {
		return nil, false
	}
	vars := map[string]string{}
	for i, s := range rt.segments {
		if name, ok := strings.CutPrefix(s, "{"); ok {
			vars[strings.TrimSuffix(name, "}")] = got[i]
		} else if s != got[i] {
			return nil, false
		}
	}
	return vars, true
}

// lookupGUID is the GUID a lookup asks about: its path's {guid}, else its
// X-GUID.
func lookupGUID(vars map[string]string, r *http.Request) string {
	if g, ok := vars["guid"]; ok {
		return g
	}
	return r.Header.Get("X-Guid")
}

func (c *core) serveCall(w http.ResponseWriter, r *http.Request, tx *generated.Transaction, body []byte) {
	guid := r.Header.Get("X-Guid")
	c.mu.Lock()
	c.calls[guid] = append(c.calls[guid], call{method: r.Method, path: r.URL.EscapedPath(), contentType: r.Header.Get("Content-Type"), body: body})
	a := posting
	if s := c.script[guid]; len(s) > 0 {
		a, c.script[guid] = s[0], s[1:]
	}
	if a.posts {
		c.posted[guid] = true
	}
	c.mu.Unlock()
	switch a.hold {
	case untilGone:
		select {
		case <-r.Context().Done():
		case <-c.stop:
		}
		return
	case untilReleased:
		c.arrived <- guid
		select {
		case <-c.release(guid):
		case <-r.Context().Done():
			return
		case <-c.stop:
			return
		}
	}
	writeJSON(w, a.status, a.body(tx, guid))
}

func (c *core) serveLookup(w http.ResponseWriter, tx *generated.Transaction, guid string) {
	c.mu.Lock()
	c.lookups[guid]++
	posted := c.posted[guid]
	c.mu.Unlock()
	if !posted {
		writeJSON(w, http.StatusNotFound, `{"error":"no such transfer"}`)
		return
	}
	writeJSON(w, http.StatusOK, withGUID(sampleJSON(tx), guid))
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// program sets the answers to guid's next calls.
func (c *core) program(guid string, answers ...answer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.script[guid] = answers
}

// post makes the core hold guid as posted: a posting that lands late.
func (c *core) post(guid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.posted[guid] = true
}

// release is the channel closed to let guid's held call (untilReleased)
// answer.
func (c *core) release(guid string) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.releases[guid]
	if !ok {
		ch = make(chan struct{})
		c.releases[guid] = ch
	}
	return ch
}

// open releases guid's held call.
func (c *core) open(guid string) { close(c.release(guid)) }

// waitArrival waits (up to 10 s) for a held call to arrive and returns its
// GUID.
func (c *core) waitArrival(t *testing.T) string {
	t.Helper()
	select {
	case g := <-c.arrived:
		return g
	case <-time.After(10 * time.Second):
		t.Fatal("no held call reached the core")
		return ""
	}
}

// callsOf lists the transaction calls about guid that reached the core.
func (c *core) callsOf(guid string) []call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]call(nil), c.calls[guid]...)
}

// lookupsOf counts the lookups of guid.
func (c *core) lookupsOf(guid string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lookups[guid]
}

// total counts every request the core received.
func (c *core) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests
}

// sample is the response of tx the core answers with: a valid value in
// every field of the response layout, at testkit.SentAt.
func sample(tx *generated.Transaction) generated.ResponseBody {
	body, err := testkit.SampleResponse(tx, testkit.SentAt)
	if err != nil {
		panic(err) // a layout SampleResponse cannot fill: extend it
	}
	return body
}

// sampleJSON is sample in the core's JSON.
func sampleJSON(tx *generated.Transaction) string {
	b, err := sample(tx).CoreJSON()
	if err != nil {
		panic(err)
	}
	return string(b)
}

// sampleFixed is sample as a frame's body.
func sampleFixed(tx *generated.Transaction) []byte {
	b, err := sample(tx).AppendTo(nil)
	if err != nil {
		panic(err)
	}
	return b
}

// withGUID adds "guid" to a JSON object, first.
func withGUID(object, guid string) string {
	rest := strings.TrimPrefix(object, "{")
	if rest == "}" {
		return `{"guid":"` + guid + `"}`
	}
	return `{"guid":"` + guid + `",` + rest
}

// okJSON is the core's 200: the transaction's response, about guid when
// the call is a POST (SPEC §3: the guid is the request's).
func okJSON(tx *generated.Transaction, guid string) string {
	if tx.Method == http.MethodPost {
		return withGUID(sampleJSON(tx), guid)
	}
	return sampleJSON(tx)
}

// jsonAnswer is a body that does not depend on the request.
func jsonAnswer(body string) func(*generated.Transaction, string) string {
	return func(*generated.Transaction, string) string { return body }
}

// result is a 422's body: {"guid":…,"result":…}.
func result(r string) func(*generated.Transaction, string) string {
	return func(_ *generated.Transaction, guid string) string {
		return withGUID(`{"result":"`+r+`"}`, guid)
	}
}
