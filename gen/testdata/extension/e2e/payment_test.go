// Package e2e is copied by gen's TestExtensionEndToEnd into a copy of the
// repository whose layouts include testdata/extension (BKXP0001, a bill
// payment with its own code map and lookup), after go generate. It drives
// that transaction through the real relay, ledger, resolve and reprocess:
// nothing but the layout file was written for it.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/assemble"
	"lhrelay/internal/batch"
	"lhrelay/internal/channel"
	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
)

// billCore is a core that knows payments: POST /v1/payments posts one (a
// second POST of a GUID would be a second payment), GET
// /v1/payments/{biller}/{guid} looks one up. A POST for a held GUID waits
// until the test releases it, then posts anyway, as a slow core does.
type billCore struct {
	mu      sync.Mutex
	posts   map[string]int
	paid    map[string]string // guid → receipt
	lookups []string          // paths of the GETs
	hold    map[string]chan struct{}
	posted  chan string // each GUID once its POST has been posted
}

func newBillCore() *billCore {
	return &billCore{posts: map[string]int{}, paid: map[string]string{}, hold: map[string]chan struct{}{}, posted: make(chan string, 16)}
}

func (c *billCore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/payments":
		var p struct {
			GUID   string `json:"guid"`
			Biller string `json:"biller"`
			BillNo string `json:"billNo"`
			Amount int64  `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Biller != "KEPCO" {
			http.Error(w, "bad payment", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		hold := c.hold[p.GUID]
		c.mu.Unlock()
		if hold != nil {
			<-hold
		}
		c.mu.Lock()
		c.posts[p.GUID]++
		receipt := fmt.Sprintf("R%015d", len(c.paid)+1)
		if _, ok := c.paid[p.GUID]; !ok {
			c.paid[p.GUID] = receipt
		}
		receipt = c.paid[p.GUID]
		c.mu.Unlock()
		c.posted <- p.GUID
		fmt.Fprintf(w, `{"guid":%q,"receipt":%q,"paidAt":"20261201093000"}`, p.GUID, receipt)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/payments/KEPCO/"):
		guid := strings.TrimPrefix(r.URL.Path, "/v1/payments/KEPCO/")
		c.mu.Lock()
		c.lookups = append(c.lookups, r.URL.Path)
		receipt, ok := c.paid[guid]
		c.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"guid":%q,"receipt":%q,"paidAt":"20261201093000"}`, guid, receipt)
	default:
		http.NotFound(w, r)
	}
}

func TestBillPaymentEndToEnd(t *testing.T) {
	tx, ok := generated.LookupTransaction("BKXP0001")
	assert.Assert(t, ok, "BKXP0001 is registered by its layout")
	assert.Equal(t, tx.Settle, generated.SettleByLookup)

	core := newBillCore()
	srv := httptest.NewServer(core)
	t.Cleanup(srv.Close)
	r, err := assemble.Start(context.Background(), assemble.Config{
		Listen: "127.0.0.1:0", Core: srv.URL, Timeout: 300 * time.Millisecond, DB: filepath.Join(t.TempDir(), "relay.db"),
	})
	assert.NilError(t, err)
	t.Cleanup(r.Close)
	l := r.Ledger()
	// The batch commands' client of the core.
	client, err := corecall.New(corecall.Config{BaseURL: srv.URL, Timeout: 300 * time.Millisecond})
	assert.NilError(t, err)

	ctx := context.Background()
	conn, err := channel.Dial(ctx, r.Addr().String(), 5*time.Second)
	assert.NilError(t, err)
	t.Cleanup(func() { conn.Close() })
	send := func(frame []byte) ([]byte, channel.Answer) {
		t.Helper()
		out, err := conn.Send(frame)
		assert.NilError(t, err)
		a, err := channel.Decode(out)
		assert.NilError(t, err)
		return out, a
	}
	payment := func(guid, billNo string) []byte {
		frame, err := channel.BuildRequest(tx.Code, guid, channel.WithDefaults(tx, map[string]string{"billNo": billNo, "amount": "45000"}), time.Now())
		assert.NilError(t, err)
		return frame
	}

	// A payment the core answers at once: 0000 with the payment's own
	// response body.
	paid := channel.NewGUID()
	_, a := send(payment(paid, "1"))
	assert.Equal(t, a.Code, generated.SourceHTTP200.Code())
	assert.Equal(t, a.Body.TxCode(), tx.Code)
	<-core.posted

	// A slow one: the relay gives up, E901, UNKNOWN; the core posts it
	// after all.
	slow := channel.NewGUID()
	release := make(chan struct{})
	core.mu.Lock()
	core.hold[slow] = release
	core.mu.Unlock()
	frame := payment(slow, "2")
	_, a = send(frame)
	assert.Equal(t, a.Code, generated.SourceReadTimeout.Code())
	close(release)
	assert.Equal(t, <-core.posted, slow)
	r.Server().WaitRecorded()
	row, err := l.Get(ctx, slow)
	assert.NilError(t, err)
	assert.Equal(t, row.State, ledger.StateUnknown)

	// resolve asks the payment's own lookup, and settles it DONE 0000
	// with a response frame of the payment's response layout.
	sum, err := batch.Resolve(ctx, l, client, batch.ResolveConfig{Now: time.Now().Add(time.Second)})
	assert.NilError(t, err)
	assert.Equal(t, sum.Count("done"), 1, sum.String())
	core.mu.Lock()
	assert.DeepEqual(t, core.lookups, []string{"/v1/payments/KEPCO/" + slow})
	receipt := core.paid[slow]
	core.mu.Unlock()
	row, err = l.Get(ctx, slow)
	assert.NilError(t, err)
	assert.Equal(t, row.State, ledger.StateDone)
	assert.Equal(t, row.RspCode, string(generated.SourceHTTP200.Code()))
	stored, err := channel.Decode(row.Response)
	assert.NilError(t, err)
	assert.Equal(t, stored.Body.TxCode(), tx.Code)
	assert.Equal(t, stored.Body.Fields()[0].Value, receipt)

	// The channel's retry gets the stored answer byte for byte.
	out, _ := send(frame)
	assert.DeepEqual(t, out, row.Response)

	// reprocess finds nothing to send: the slow payment was posted.
	sum, err = batch.Reprocess(ctx, l, client, batch.ReprocessConfig{MaxAttempts: 5, Now: time.Now()})
	assert.NilError(t, err)
	assert.Equal(t, sum.Count("selected"), 0, sum.String())

	core.mu.Lock()
	defer core.mu.Unlock()
	assert.DeepEqual(t, core.posts, map[string]int{paid: 1, slow: 1})
}
