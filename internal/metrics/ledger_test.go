package metrics

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestLedgerDown: while the shared ledger's database is down, /readyz is
// 503 and the failed claims are counted in lhrelay_ledger_errors_total;
// once it is back, /readyz is 200 again without a restart of the relay.
func TestLedgerDown(t *testing.T) {
	led, err := ledger.Open(pgtest.URL(t), ledger.WithRetry(0, 0))
	assert.NilError(t, err)
	defer led.Close()
	m := New()
	m.WatchLedger(led)
	h := m.Handler(led.Ping)
	status, _ := get(t, h, "/readyz")
	assert.Equal(t, status, http.StatusOK)

	pgtest.Stop(t)
	up := false
	defer func() {
		if !up {
			pgtest.Start(t)
		}
	}()
	guid := strings.Repeat("0", 31) + "1"
	f := testkit.Transfer(t, guid, nil)
	for range 2 {
		_, err := led.Claim(context.Background(), ledger.Request{GUID: guid, TxCode: testkit.TransferTx().Code, Frame: f, Body: f[generated.HeaderLen:]})
		assert.Check(t, err != nil)
	}
	status, body := get(t, h, "/readyz")
	assert.Equal(t, status, http.StatusServiceUnavailable, body)
	_, body = get(t, h, "/metrics")
	assert.Check(t, is.Contains(body, `lhrelay_ledger_errors_total{op="claim"} 2`+"\n"))

	pgtest.Start(t)
	up = true
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, body = get(t, h, "/readyz")
		if status == http.StatusOK {
			break
		}
		assert.Assert(t, time.Now().Before(deadline), "still not ready: %s", body)
		time.Sleep(50 * time.Millisecond)
	}
}
