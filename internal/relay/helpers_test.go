package relay

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/admit"
	"lhrelay/internal/breaker"
	"lhrelay/internal/corecall"
	"lhrelay/internal/coresim"
	"lhrelay/internal/fixedwidth"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/metrics"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

// Accounts of the simulated core (SPEC §8).
const (
	acctRich  = "11002003004005" // 1,000,000
	acctEmpty = "11002003004006" // 0
	acctNone  = "11002003009999" // does not exist
	acctOther = "22003004005006" // at another bank
)

// A transferOpt sets a field of transferFrame's request, by JSON key.
type transferOpt func(fields map[string]string)

func memo(m string) transferOpt { return func(f map[string]string) { f["memo"] = m } }
func amount(a int64) transferOpt {
	return func(f map[string]string) { f["amount"] = strconv.FormatInt(a, 10) }
}
func wdAcct(a string) transferOpt { return func(f map[string]string) { f["wdAcct"] = a } }

// header is the header of testkit's request frames of tx.
func header(guid, tx string) *generated.Header {
	return &generated.Header{TxCode: tx, GUID: guid, Flag: generated.FlagRequest, SrcOrg: generated.DefaultSrcOrg, DstOrg: generated.DefaultDstOrg, SentAt: fixedwidth.FormatTimestamp(testkit.SentAt)}
}

// transferFrame builds a request frame of testkit.TransferTx: 500.00 from
// the rich account to another bank, unless opts say otherwise.
func transferFrame(t testing.TB, guid string, opts ...transferOpt) []byte {
	t.Helper()
	fields := map[string]string{"wdAcct": acctRich, "dpBank": "004", "dpAcct": acctOther, "amount": "50000", "memo": "rent"}
	for _, o := range opts {
		o(fields)
	}
	return testkit.Transfer(t, guid, fields)
}

// inquiryFrame builds a request frame of testkit.ReadTx asking about acct.
func inquiryFrame(t testing.TB, guid, acct string) []byte {
	t.Helper()
	return testkit.Frame(t, testkit.ReadTx(), guid, map[string]string{"acct": acct})
}

// answer is a decoded response frame.
type answer struct {
	raw []byte
	hdr generated.Header // fields as found at their positions (not checked)
}

func (a answer) code() string { return a.hdr.RspCode }

func parseAnswer(t testing.TB, raw []byte) answer {
	t.Helper()
	a := answer{raw: raw, hdr: generated.RawHeader(raw)}
	assert.Assert(t, len(raw) >= generated.HeaderLen, "answer %q shorter than a header", raw)
	assert.Equal(t, a.hdr.Flag, generated.FlagResponse, "answer %q", raw)
	return a
}

// env is a relay under test with its core and, optionally, a ledger.
type env struct {
	t    *testing.T
	srv  *Server
	addr string
	led  *ledger.Ledger
	log  *testkit.SyncBuffer
	core *httptest.Server
	done chan error // Serve's result
}

type envConfig struct {
	core           http.Handler // nil: none started (coreURL must be set)
	coreURL        string
	ledger         bool
	ledgerURL      string // with ledger: a PostgreSQL ledger instead of a file
	ledgerOpts     []ledger.Option
	timeout        time.Duration
	connectTimeout time.Duration
	dial           corecall.DialFunc
	frameTimeout   time.Duration
	idleTimeout    time.Duration
	maxConns       int
	maxPerAddr     int
	// noRoomFor replaces defaultNoRoomFor when set (time.Nanosecond: Ready
	// says "no room" only while the relay is full).
	noRoomFor      time.Duration
	hook           func(stage)
	connDone       func()
	ledgerOverride Ledger
	metrics        *metrics.Metrics
	tls            *tls.Config    // channel side (Config.TLS)
	allow          []netip.Prefix // Config.Allow
	clientOrgs     *ClientOrgs    // Config.ClientOrgs
	coreTLS        *tls.Config    // the core client's (corecall.Config.TLS)
	breaker        *breaker.Breaker
	limiter        *admit.Limiter
	// logger builds the relay's logger over the env's log buffer; nil: a
	// text handler at debug level.
	logger func(buf *testkit.SyncBuffer) *slog.Logger
}

func startEnv(t *testing.T, cfg envConfig) *env {
	t.Helper()
	e := &env{t: t, log: &testkit.SyncBuffer{}, done: make(chan error, 1)}
	url := cfg.coreURL
	if cfg.core != nil {
		e.core = httptest.NewServer(cfg.core)
		t.Cleanup(e.core.Close)
		url = e.core.URL
	}
	client, err := corecall.New(corecall.Config{
		BaseURL:        url,
		Timeout:        cmp.Or(cfg.timeout, 5*time.Second),
		ConnectTimeout: cfg.connectTimeout,
		Dial:           cfg.dial,
		TLS:            cfg.coreTLS,
	})
	assert.NilError(t, err)
	t.Cleanup(client.CloseIdleConnections)

	var led Ledger
	if cfg.ledger {
		db := cmp.Or(cfg.ledgerURL, filepath.Join(t.TempDir(), "relay.db"))
		e.led, err = ledger.Open(db, cfg.ledgerOpts...)
		assert.NilError(t, err)
		t.Cleanup(func() { e.led.Close() })
		led = e.led
	}
	if cfg.ledgerOverride != nil {
		led = cfg.ledgerOverride
	}
	logger := slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.logger != nil {
		logger = cfg.logger(e.log)
	}
	rc := Config{
		Core:            client,
		Ledger:          led,
		FrameTimeout:    cfg.frameTimeout,
		IdleTimeout:     cfg.idleTimeout,
		MaxConns:        cfg.maxConns,
		MaxConnsPerAddr: cfg.maxPerAddr,
		Logger:          logger,
		TLS:             cfg.tls,
		Allow:           cfg.allow,
		ClientOrgs:      cfg.clientOrgs,
		Breaker:         cfg.breaker,
		Limiter:         cfg.limiter,
	}
	if cfg.metrics != nil { // not a nil *Metrics in a non-nil interface
		rc.Metrics = cfg.metrics
	}
	e.srv, err = New(rc)
	assert.NilError(t, err)
	e.srv.hook = cfg.hook
	e.srv.connDone = cfg.connDone
	if cfg.noRoomFor != 0 {
		e.srv.noRoomFor = cfg.noRoomFor
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	e.addr = ln.Addr().String()
	go func() { e.done <- e.srv.Serve(ln) }()
	t.Cleanup(func() {
		e.srv.Close()
		if t.Failed() {
			t.Logf("relay log:\n%s", e.log)
		}
	})
	return e
}

// dial opens a channel connection with a deadline that keeps a broken test
// from hanging.
func (e *env) dial() net.Conn {
	e.t.Helper()
	c, err := net.Dial("tcp", e.addr)
	assert.NilError(e.t, err)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	e.t.Cleanup(func() { c.Close() })
	return c
}

// read reads one answer frame from c.
func (e *env) read(c net.Conn) answer {
	e.t.Helper()
	raw, err := wire.ReadFrame(c, nil)
	assert.NilError(e.t, err, "reading the answer")
	return parseAnswer(e.t, raw)
}

// send writes frame on c and reads the answer.
func (e *env) send(c net.Conn, frame []byte) answer {
	e.t.Helper()
	_, err := c.Write(frame)
	assert.NilError(e.t, err)
	return e.read(c)
}

// roundTrip sends one frame on a new connection.
func (e *env) roundTrip(frame []byte) answer {
	e.t.Helper()
	c := e.dial()
	defer c.Close()
	return e.send(c, frame)
}

// expectClosed asserts that the relay closes c without sending more.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	b, err := io.ReadAll(c)
	assert.Assert(t, err == nil || errors.Is(err, net.ErrClosed) || isReset(err), "err %v", err)
	assert.Equal(t, len(b), 0, "unexpected bytes %q", b)
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "read"
}

// row reads a ledger row, once every outcome answered so far is recorded.
func (e *env) row(guid string) ledger.Row {
	e.t.Helper()
	e.srv.WaitRecorded()
	r, err := e.led.Get(context.Background(), guid)
	assert.NilError(e.t, err)
	return r
}

func (e *env) noRow(guid string) {
	e.t.Helper()
	e.srv.WaitRecorded()
	_, err := e.led.Get(context.Background(), guid)
	assert.ErrorIs(e.t, err, ledger.ErrNotFound)
}

// counting wraps a handler and counts the calls to it.
type counting struct {
	h     http.Handler
	calls atomic.Int64
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.calls.Add(1)
	c.h.ServeHTTP(w, r)
}

func reply(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// posted is a core that posts every transfer: a 200 about the GUID asked
// for (X-GUID), as the core's API says, with another's guid when about is
// given ("-" for none).
func posted(about string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		guid := `"guid":"` + r.Header.Get("X-GUID") + `",`
		switch about {
		case "":
		case "-":
			guid = ""
		default:
			guid = `"guid":"` + about + `",`
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{`+guid+`"txId":"T1","balance":1,"postedAt":"20261129103000"}`)
	}
}

// gate is a core behind a testkit.Gate: every request is announced and
// held until opened, then answered by the core.
type gate struct {
	*testkit.Gate
	http.Handler
}

// newGate is next behind a closed gate. A simulator is gated by its
// arrival hook instead: newSimGate.
func newGate(next http.Handler) *gate {
	g := testkit.NewGate(16)
	return &gate{g, g.Wrap(next)}
}

// simCore returns a simulator with the SPEC §8 accounts and a short SLOW
// delay.
func simCore(delay time.Duration) *coresim.Server {
	return coresim.New(coresim.Config{Delay: delay})
}

// gatedSim is a simulator with the SPEC §8 accounts whose arrival hook is
// g: the requests g holds wait at the core's door.
func gatedSim(g *testkit.Gate) *coresim.Server {
	return coresim.New(coresim.Config{Arrived: g.Hold})
}

// refuseFirstDial is a dialer whose first connection is refused, as a core
// that is down for a moment refuses it; later ones connect.
func refuseFirstDial() corecall.DialFunc {
	var refuse sync.Once
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		first := false
		refuse.Do(func() { first = true })
		if first {
			return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("connection refused (test)")}
		}
		return d.DialContext(ctx, network, addr)
	}
}

func blockingDial(ctx context.Context, _, _ string) (net.Conn, error) {
	<-ctx.Done()
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: ctx.Err()}
}
