package corecall_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/corecall"
	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
)

const guid = "0123456789abcdef0123456789abcdef"

func bktr(t *testing.T) *generated.Transaction {
	tx, ok := generated.LookupTransaction("BKTR0001")
	assert.Assert(t, ok)
	return tx
}

func bkiq(t *testing.T) *generated.Transaction {
	tx, ok := generated.LookupTransaction("BKIQ0001")
	assert.Assert(t, ok)
	return tx
}

func transfer(memo string) *generated.BKTR0001Request {
	return &generated.BKTR0001Request{WdBank: "081", WdAcct: "11002003004005", DpBank: "004", DpAcct: "22003004005006", Amount: 50000, Memo: memo}
}

func newClient(t *testing.T, cfg corecall.Config) *corecall.Client {
	t.Helper()
	c, err := corecall.New(cfg)
	assert.NilError(t, err)
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// recorded is one request as a steerable core saw it.
type recorded struct {
	method, path, guid, contentType string
	body                            []byte
}

// steerable is a core whose answer a test sets, recording every request.
type steerable struct {
	mu     sync.Mutex
	calls  []recorded
	answer http.HandlerFunc
}

func (s *steerable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.calls = append(s.calls, recorded{r.Method, r.URL.EscapedPath(), r.Header.Get("X-GUID"), r.Header.Get("Content-Type"), b})
	answer := s.answer
	s.mu.Unlock()
	answer(w, r)
}

func (s *steerable) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

func (s *steerable) last() recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[len(s.calls)-1]
}

func reply(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func startSteerable(t *testing.T) (*steerable, *httptest.Server) {
	core := &steerable{answer: reply(http.StatusOK, `{}`)}
	srv := httptest.NewServer(core)
	t.Cleanup(srv.Close)
	return core, srv
}

const okTransfer = `{"guid":"` + guid + `","txId":"T000000000000001","balance":950000,"postedAt":"20261129103000"}`

func TestCallOutcomes(t *testing.T) {
	core, srv := startSteerable(t)
	c := newClient(t, corecall.Config{BaseURL: srv.URL, Timeout: 5 * time.Second})
	for _, tc := range []struct {
		name   string
		tx     *generated.Transaction
		status int
		body   string
		want   generated.Source
	}{
		{"200", bktr(t), 200, okTransfer, generated.SourceHTTP200},
		{"200 garbage", bktr(t), 200, `{"txId":`, generated.SourceReadTimeout},
		{"200 about another guid", bktr(t), 200, strings.Replace(okTransfer, guid, "fedcba9876543210fedcba9876543210", 1), generated.SourceReadTimeout},
		{"200 about no guid", bktr(t), 200, `{"txId":"T000000000000001","balance":950000,"postedAt":"20261129103000"}`, generated.SourceReadTimeout},
		{"200 not JSON", bktr(t), 200, `<html>`, generated.SourceReadTimeout},
		{"200 missing key", bktr(t), 200, `{"guid":"` + guid + `","txId":"T1","balance":1}`, generated.SourceReadTimeout},
		{"200 value too long for the layout", bktr(t), 200, `{"guid":"` + guid + `","txId":"T0000000000000001X","balance":1,"postedAt":"20261129103000"}`, generated.SourceReadTimeout},
		{"200 negative balance", bktr(t), 200, `{"guid":"` + guid + `","txId":"T1","balance":-1,"postedAt":"20261129103000"}`, generated.SourceReadTimeout},
		{"200 bad timestamp", bktr(t), 200, `{"guid":"` + guid + `","txId":"T1","balance":1,"postedAt":"20261329103000"}`, generated.SourceReadTimeout},
		{"422 insufficient funds", bktr(t), 422, `{"guid":"` + guid + `","result":"INSUFFICIENT_FUNDS"}`, generated.SourceInsufficientFunds},
		{"422 no account", bktr(t), 422, `{"result":"NO_ACCOUNT"}`, generated.SourceNoAccount},
		{"422 limit", bktr(t), 422, `{"result":"LIMIT_EXCEEDED"}`, generated.SourceLimitExceeded},
		{"422 unknown result", bktr(t), 422, `{"result":"FROZEN"}`, generated.SourceHTTP500},
		{"422 garbage", bktr(t), 422, `nope`, generated.SourceHTTP500},
		{"500", bktr(t), 500, `{"error":"x"}`, generated.SourceHTTP500},
		{"400", bktr(t), 400, `{"error":"x"}`, generated.SourceHTTP500},
		{"404 transfer", bktr(t), 404, ``, generated.SourceHTTP500},
		{"503", bktr(t), 503, ``, generated.SourceHTTP500},
		{"504", bktr(t), 504, ``, generated.SourceReadTimeout},
		{"201", bktr(t), 201, okTransfer, generated.SourceReadTimeout},
		{"302 not followed", bktr(t), 302, ``, generated.SourceReadTimeout},
		{"404 inquiry is NO_ACCOUNT by its layout", bkiq(t), 404, `404 page not found`, generated.SourceNoAccount},
		{"200 inquiry", bkiq(t), 200, `{"bank":"LHB","acct":"11002003004005","balance":1000000,"asOf":"20261129103000"}`, generated.SourceHTTP200},
		{"500 inquiry", bkiq(t), 500, ``, generated.SourceHTTP500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core.mu.Lock()
			core.answer = reply(tc.status, tc.body)
			core.mu.Unlock()
			before := core.count()
			var req generated.RequestBody = transfer("rent")
			if tc.tx.Code == "BKIQ0001" {
				req = &generated.BKIQ0001Request{Bank: "081", Acct: "11002003004005"}
			}
			res := c.Call(context.Background(), tc.tx, guid, req)
			assert.Equal(t, res.Source, tc.want, "err: %v", res.Err)
			assert.Equal(t, res.Status, tc.status)
			assert.Equal(t, core.count(), before+1, "exactly one call")
			if tc.want == generated.SourceHTTP200 {
				assert.Assert(t, res.Body != nil)
				_, err := res.Body.AppendTo(nil)
				assert.NilError(t, err)
			} else {
				assert.Assert(t, res.Body == nil)
			}
		})
	}
}

func TestCallRequestShape(t *testing.T) {
	core, srv := startSteerable(t)
	core.answer = reply(200, okTransfer)
	c := newClient(t, corecall.Config{BaseURL: srv.URL + "/"})

	res := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceHTTP200)
	got := core.last()
	assert.Equal(t, got.method, "POST")
	assert.Equal(t, got.path, "/v1/transfers")
	assert.Equal(t, got.guid, guid)
	assert.Equal(t, got.contentType, "application/json")
	var j map[string]any
	assert.NilError(t, json.Unmarshal(got.body, &j))
	assert.DeepEqual(t, j, map[string]any{"guid": guid, "wdBank": "LHB", "wdAcct": "11002003004005", "dpBank": "KBK", "dpAcct": "22003004005006", "amount": 50000.0, "memo": "rent"})

	core.answer = reply(200, `{"balance":1,"asOf":"20261129103000"}`)
	res = c.Call(context.Background(), bkiq(t), guid, &generated.BKIQ0001Request{Bank: "081", Acct: "00000000000042"})
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	got = core.last()
	assert.Equal(t, got.method, "GET")
	assert.Equal(t, got.path, "/v1/accounts/LHB/00000000000042")
	assert.Equal(t, got.guid, guid)
	assert.Equal(t, len(got.body), 0)
}

func TestCallPrepareError(t *testing.T) {
	_, srv := startSteerable(t)
	c := newClient(t, corecall.Config{BaseURL: srv.URL})
	req := transfer("rent")
	req.WdBank = "999" // not in the BANK map: cannot be sent
	res := c.Call(context.Background(), bktr(t), guid, req)
	assert.Equal(t, res.Source, generated.SourceConnectFail)
	assert.ErrorContains(t, res.Err, "WD_BANK")
}

func TestConnectRefused(t *testing.T) {
	c := newClient(t, corecall.Config{BaseURL: testkit.ClosedURL(t)})
	res := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceConnectFail, "err: %v", res.Err)
	assert.Equal(t, res.Status, 0)
	assert.ErrorIs(t, res.Err, syscall.ECONNREFUSED)
	assert.ErrorContains(t, res.Err, "connecting")
}

// blockingDial is a dialer that never connects: it waits for its context,
// like a SYN into a black hole.
func blockingDial(ctx context.Context, _, _ string) (net.Conn, error) {
	<-ctx.Done()
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: ctx.Err()}
}

func TestConnectTimeout(t *testing.T) {
	c := newClient(t, corecall.Config{BaseURL: "http://192.0.2.1:9", Timeout: 5 * time.Second, ConnectTimeout: 100 * time.Millisecond, Dial: blockingDial})
	start := time.Now()
	res := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceConnectFail, "err: %v", res.Err)
	assert.Assert(t, time.Since(start) < 2*time.Second, "gave up after the connect timeout, not the call timeout")
}

func TestConnectTimeoutCappedByTimeout(t *testing.T) {
	c := newClient(t, corecall.Config{BaseURL: "http://192.0.2.1:9", Timeout: 150 * time.Millisecond, ConnectTimeout: time.Hour, Dial: blockingDial})
	start := time.Now()
	res := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceConnectFail, "err: %v", res.Err)
	assert.Assert(t, time.Since(start) < 2*time.Second)
}

func TestUnresolvableHost(t *testing.T) {
	c := newClient(t, corecall.Config{BaseURL: "http://core.invalid:9201", Timeout: 2 * time.Second, ConnectTimeout: time.Second})
	res := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceConnectFail, "err: %v", res.Err)
}

func TestReadTimeout(t *testing.T) {
	core, srv := startSteerable(t)
	release := make(chan struct{})
	defer close(release)
	core.answer = func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
	const timeout = 200 * time.Millisecond
	c := newClient(t, corecall.Config{BaseURL: srv.URL, Timeout: timeout})
	start := time.Now()
	res := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	elapsed := time.Since(start)
	assert.Equal(t, res.Source, generated.SourceReadTimeout, "err: %v", res.Err)
	assert.ErrorIs(t, res.Err, context.DeadlineExceeded)
	assert.Assert(t, elapsed >= timeout && elapsed < timeout+time.Second, "elapsed %v", elapsed)
	assert.Equal(t, core.count(), 1)
}

// TestSlowBodyIsReadTimeout: the deadline covers reading the answer too.
func TestSlowBodyIsReadTimeout(t *testing.T) {
	core, srv := startSteerable(t)
	release := make(chan struct{})
	defer close(release)
	core.answer = func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		io.WriteString(w, `{"txId":`)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
	c := newClient(t, corecall.Config{BaseURL: srv.URL, Timeout: 200 * time.Millisecond})
	res := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceReadTimeout, "err: %v", res.Err)
	assert.Equal(t, res.Status, 200)
}

// hijackClose reads the request and then drops the connection without a
// word: the core got the request, so the result is unknown.
func hijackClose(w http.ResponseWriter, r *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

func TestConnectionClosedAfterRequest(t *testing.T) {
	core, srv := startSteerable(t)
	core.answer = hijackClose
	c := newClient(t, corecall.Config{BaseURL: srv.URL})
	res := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceReadTimeout, "err: %v", res.Err)
	assert.Equal(t, core.count(), 1)
}

// TestNoRetryOnReusedConnection: net/http retries a replayable request on a
// reused connection the server closed without answering. Neither a POST nor
// a GET of ours may be sent twice.
func TestNoRetryOnReusedConnection(t *testing.T) {
	for _, tc := range []struct {
		name string
		tx   *generated.Transaction
		req  generated.RequestBody
		ok   string
	}{
		{"POST", bktr(t), transfer("rent"), okTransfer},
		{"GET", bkiq(t), &generated.BKIQ0001Request{Bank: "081", Acct: "11002003004005"}, `{"balance":1,"asOf":"20261129103000"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, srv := startSteerable(t)
			core.answer = reply(200, tc.ok)
			c := newClient(t, corecall.Config{BaseURL: srv.URL})
			res := c.Call(context.Background(), tc.tx, guid, tc.req)
			assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)

			core.mu.Lock()
			core.answer = hijackClose
			core.mu.Unlock()
			res = c.Call(context.Background(), tc.tx, guid, tc.req)
			assert.Assert(t, res.ConnReused, "the second call must ride the pooled connection for this test to mean anything")
			assert.Equal(t, res.Source, generated.SourceReadTimeout, "err: %v", res.Err)
			assert.Equal(t, core.count(), 2, "the second call reached the core once, not twice")
		})
	}
}

// faultyConn lets a test make the next write fail, with none or some of
// its bytes sent first.
type faultyConn struct {
	net.Conn
	mode *atomic.Int32 // 0 normal, 1 fail sending nothing, 2 fail after sending half
}

func (f *faultyConn) Write(p []byte) (int, error) {
	switch f.mode.Load() {
	case 1:
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
	case 2:
		n, _ := f.Conn.Write(p[:len(p)/2])
		return n, &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return f.Conn.Write(p)
}

// TestWriteFailureOnPooledConnection: a write the kernel refuses outright
// sent nothing (E902, and it is not retried); a write that failed halfway
// may have reached the core (E901).
func TestWriteFailureOnPooledConnection(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode int32
		want generated.Source
	}{
		{"nothing written", 1, generated.SourceConnectFail},
		{"half written", 2, generated.SourceReadTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, srv := startSteerable(t)
			core.answer = reply(200, okTransfer)
			var mode atomic.Int32
			var d net.Dialer
			c := newClient(t, corecall.Config{BaseURL: srv.URL, Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
				conn, err := d.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &faultyConn{Conn: conn, mode: &mode}, nil
			}})
			res := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
			assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)

			mode.Store(tc.mode)
			res = c.Call(context.Background(), bktr(t), guid, transfer("rent"))
			assert.Assert(t, res.ConnReused)
			assert.Equal(t, res.Source, tc.want, "err: %v", res.Err)
			assert.Equal(t, core.count(), 1, "the failed call was not retried on another connection")

			// The next call dials afresh and works.
			mode.Store(0)
			res = c.Call(context.Background(), bktr(t), guid, transfer("rent"))
			assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
			assert.Assert(t, !res.ConnReused)
		})
	}
}

// closeNotingConn reports when the transport closes it.
type closeNotingConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *closeNotingConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// TestStaleKeepAlive: the core closes an idle keep-alive connection; the
// next call must not be answered with a wrong code because of it.
func TestStaleKeepAlive(t *testing.T) {
	core, srv := startSteerable(t)
	core.answer = reply(200, okTransfer)
	conns := make(chan *closeNotingConn, 4)
	c := newClient(t, corecall.Config{BaseURL: srv.URL, Dial: notingDial(conns)})
	res := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	first := <-conns

	srv.CloseClientConnections() // the core's idle timeout, in effect
	select {
	case <-first.closed: // the transport noticed and dropped it from its pool
	case <-time.After(5 * time.Second):
		t.Fatal("transport did not notice the core closing the connection")
	}
	res = c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	assert.Assert(t, !res.ConnReused)
	assert.Equal(t, core.count(), 2)
}

func TestCancelledBeforeConnectIsNotSent(t *testing.T) {
	c := newClient(t, corecall.Config{BaseURL: "http://192.0.2.1:9", Dial: blockingDial})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := c.Call(ctx, bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceConnectFail, "err: %v", res.Err)
}

func TestLookup(t *testing.T) {
	sim := coresim.New(coresim.Config{})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	c := newClient(t, corecall.Config{BaseURL: srv.URL})

	found, err := c.Lookup(context.Background(), bktr(t), guid, transfer("rent"))
	assert.NilError(t, err)
	assert.Assert(t, !found.Posted && found.Body == nil)

	res := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	found, err = c.Lookup(context.Background(), bktr(t), guid, transfer("rent"))
	assert.NilError(t, err)
	assert.Assert(t, found.Posted)
	assert.DeepEqual(t, found.Body, res.Body)
	assert.Equal(t, sim.Stats().Calls, 1, "a lookup is not a transfer")
}

// TestLongHeaderLine: a core (or a gateway in front of it) adding a header
// line longer than the client's read buffer to its answers — a trace
// header, a cookie — is read like any other: the 200 of the POST is the
// posted transfer, the 200 of its lookup settles it, and the connection
// stays in step for the next call. Only a header section over the limit is
// refused, as an answer that cannot be used: E901 for the call, which was
// sent.
func TestLongHeaderLine(t *testing.T) {
	sim := coresim.New(coresim.Config{})
	var pad atomic.Int64
	pad.Store(5 << 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Gateway-Trace", strings.Repeat("t", int(pad.Load())))
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, corecall.Config{BaseURL: srv.URL, Timeout: 5 * time.Second})

	res := c.Call(context.Background(), bktr(t), guid, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceHTTP200, "err: %v", res.Err)
	found, err := c.Lookup(context.Background(), bktr(t), guid, transfer("rent"))
	assert.NilError(t, err)
	assert.Assert(t, found.Posted)
	assert.DeepEqual(t, found.Body, res.Body)
	inq := c.Call(context.Background(), bkiq(t), guid, &generated.BKIQ0001Request{Bank: "081", Acct: "11002003004005"})
	assert.Equal(t, inq.Source, generated.SourceHTTP200, "err: %v", inq.Err)

	pad.Store(70 << 10)
	other := "fedcba9876543210fedcba9876543210"
	res = c.Call(context.Background(), bktr(t), other, transfer("rent"))
	assert.Equal(t, res.Source, generated.SourceReadTimeout, "err: %v", res.Err)
	assert.ErrorContains(t, res.Err, "header longer than 65536 bytes")
	assert.Equal(t, sim.Stats().Calls, 2, "each transfer reached the core once")
	_, err = c.Lookup(context.Background(), bktr(t), other, transfer("rent"))
	assert.ErrorContains(t, err, "header longer than 65536 bytes")
}

// TestLookupNone: a transaction declared "lookup none" is refused before
// any call.
func TestLookupNone(t *testing.T) {
	core, srv := startSteerable(t)
	c := newClient(t, corecall.Config{BaseURL: srv.URL})
	for _, tx := range generated.Transactions() {
		if tx.Settle != generated.SettleAsNotPosted {
			continue
		}
		_, err := c.Lookup(context.Background(), tx, guid, tx.NewRequest())
		assert.ErrorIs(t, err, generated.ErrNoLookup)
	}
	assert.Equal(t, core.count(), 0)
}

// TestLookupErrors: every answer that settles nothing is an error; one the
// core gave whole about the request (a status that does not say the core
// is unavailable, a body that does not fit or is about another GUID) is
// marked ErrUnusableAnswer, so that a batch run goes on past its row, and
// no answer at all, or a status saying the core is unavailable, is not.
func TestLookupErrors(t *testing.T) {
	core, srv := startSteerable(t)
	c := newClient(t, corecall.Config{BaseURL: srv.URL})
	for _, tc := range []struct {
		name     string
		answer   http.HandlerFunc
		want     string
		unusable bool
	}{
		{"500", reply(500, ``), "HTTP 500", true},
		{"garbage", reply(200, `{`), "undecodable", true},
		{"too long", reply(200, `{"guid":"`+guid+`","txId":"T0000000000000001X","balance":1,"postedAt":"20261129103000"}`), "does not fit", true},
		{"other guid", reply(200, `{"guid":"ffffffffffffffffffffffffffffffff","txId":"T1","balance":1,"postedAt":"20261129103000"}`), `not about GUID ` + guid + ` (guid "ffff`, true},
		{"no guid", reply(200, `{"txId":"T1","balance":1,"postedAt":"20261129103000"}`), "(guid missing)", true},
		{"403", reply(403, ``), "HTTP 403", true},
		{"503", reply(503, `maintenance`), "HTTP 503", false},
		{"504", reply(504, ``), "HTTP 504", false},
		{"dropped", hijackClose, "lookup", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core.mu.Lock()
			core.answer = tc.answer
			core.mu.Unlock()
			found, err := c.Lookup(context.Background(), bktr(t), guid, transfer("rent"))
			assert.Assert(t, !found.Posted)
			assert.ErrorContains(t, err, tc.want)
			assert.Equal(t, errors.Is(err, corecall.ErrUnusableAnswer), tc.unusable, "%v", err)
		})
	}
	got := core.last()
	assert.Equal(t, got.method, "GET")
	assert.Equal(t, got.path, "/v1/transfers/"+guid)

	c = newClient(t, corecall.Config{BaseURL: testkit.ClosedURL(t)})
	_, err := c.Lookup(context.Background(), bktr(t), guid, transfer("rent"))
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.Assert(t, !errors.Is(err, corecall.ErrUnusableAnswer))
}

// TestLookupStatusClasses: every registered status besides 200 and 404 is
// an error, marked ErrUnusableAnswer unless it says the core (not the one
// request) cannot be served now: 429, 502, 503, 504.
func TestLookupStatusClasses(t *testing.T) {
	core, srv := startSteerable(t)
	c := newClient(t, corecall.Config{BaseURL: srv.URL})
	unavailable := map[int]bool{429: true, 502: true, 503: true, 504: true}
	for status := 200; status < 600; status++ {
		if http.StatusText(status) == "" || status == http.StatusOK || status == http.StatusNotFound {
			continue
		}
		core.mu.Lock()
		core.answer = reply(status, ``)
		core.mu.Unlock()
		_, err := c.Lookup(context.Background(), bktr(t), guid, transfer("rent"))
		assert.Assert(t, err != nil, "HTTP %d", status)
		assert.Equal(t, errors.Is(err, corecall.ErrUnusableAnswer), !unavailable[status], "HTTP %d: %v", status, err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:9201", "ftp://x", "http://", "http://h:1/?q=1", "http://u:p@h:1", "::"} {
		_, err := corecall.New(corecall.Config{BaseURL: u})
		assert.Assert(t, err != nil, "URL %q", u)
	}
	_, err := corecall.New(corecall.Config{BaseURL: "http://h:1", Timeout: -1})
	assert.Assert(t, err != nil)
}

func TestConcurrentCalls(t *testing.T) {
	sim := coresim.New(coresim.Config{Accounts: []coresim.Account{{Bank: "LHB", Acct: "11002003004005", Balance: coresim.MaxBalance}}})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	c := newClient(t, corecall.Config{BaseURL: srv.URL})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := fmt.Sprintf("%032x", i)
			res := c.Call(context.Background(), bktr(t), g, transfer("rent"))
			if res.Source != generated.SourceHTTP200 {
				errs <- fmt.Errorf("%s: %s: %v", g, res.Source, res.Err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assert.Equal(t, sim.Stats().Calls, 64)
}
