package testkit

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// ClosedAddr returns a 127.0.0.1 address nothing listens on: a core that
// is down refuses connections there.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testkit: listen: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// ClosedURL is ClosedAddr as a core's base URL.
func ClosedURL(t testing.TB) string {
	t.Helper()
	return "http://" + ClosedAddr(t)
}

// Gate is the one way tests notice that a call reached the core: each
// request it holds is announced (its X-Guid) as it arrives, and waits
// there until Open, or until its caller has gone. Hold is a simulator's
// arrival hook (coresim.Config.Arrived); Wrap puts the gate in front of
// any other core handler.
type Gate struct {
	arrived chan string
	left    chan string
	release chan struct{}
	once    sync.Once
	only    func(*http.Request) bool
}

// NewGate is a closed gate with room to announce room arrivals that
// nobody has waited for yet (a request beyond that waits to be announced),
// and room callers that left while held (WaitLeft; beyond that a departure
// goes unannounced).
func NewGate(room int) *Gate {
	return &Gate{arrived: make(chan string, room), left: make(chan string, room), release: make(chan struct{})}
}

// Only makes the gate hold just the requests for which keep reports true;
// the others pass unannounced. It returns g.
func (g *Gate) Only(keep func(*http.Request) bool) *Gate {
	g.only = keep
	return g
}

// ForGUID is an Only filter: the requests about guid (X-Guid).
func ForGUID(guid string) func(*http.Request) bool {
	return func(r *http.Request) bool { return r.Header.Get("X-Guid") == guid }
}

// Hold announces r and waits until the gate is open or r's caller has
// gone.
func (g *Gate) Hold(r *http.Request) {
	if g.only != nil && !g.only(r) {
		return
	}
	// Read the body first: net/http notices a client going away (and ends
	// r.Context()) only once the body has been read.
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	g.arrived <- r.Header.Get("X-Guid")
	select {
	case <-g.release:
	case <-r.Context().Done():
		select { // announced only while there is room: most tests never ask
		case g.left <- r.Header.Get("X-Guid"):
		default:
		}
	}
}

// Wrap is next behind the gate. A request whose caller went away while
// held is not served.
func (g *Gate) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.Hold(r)
		if r.Context().Err() != nil {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Open lets every held and future request through.
func (g *Gate) Open() { g.once.Do(func() { close(g.release) }) }

// Arrived announces each held request's GUID; its length is how many
// arrivals nobody has taken yet.
func (g *Gate) Arrived() <-chan string { return g.arrived }

// WaitLeft waits (up to 10 s) until the server has noticed that a held
// request's caller went away, and returns its GUID. A client's cancel
// returns before the server sees the connection close; only after
// WaitLeft may a test open the gate and expect that request unserved.
func (g *Gate) WaitLeft(t testing.TB) string {
	t.Helper()
	return receive(t, g.left, "no held request's caller went away")
}

// WaitArrival waits (up to 10 s) for a request to be held and returns its
// GUID.
func (g *Gate) WaitArrival(t testing.TB) string {
	t.Helper()
	return receive(t, g.arrived, "no request reached the core")
}

// receive takes the next GUID from c, failing t with missing after 10 s.
func receive(t testing.TB, c <-chan string, missing string) string {
	t.Helper()
	select {
	case guid := <-c:
		return guid
	case <-time.After(10 * time.Second):
		t.Fatal("testkit: " + missing)
		return ""
	}
}
