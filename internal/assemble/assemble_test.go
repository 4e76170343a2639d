package assemble_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/app"
	"lhrelay/internal/assemble"
	"lhrelay/internal/channel"
	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/metrics"
	"lhrelay/internal/testkit"
)

const waitLimit = 10 * time.Second

func newCore(t *testing.T) string {
	t.Helper()
	core := httptest.NewServer(coresim.New(coresim.Config{}))
	t.Cleanup(core.Close)
	return core.URL
}

func transfer(t *testing.T, addr, guid string) channel.Answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	c, err := channel.Dial(ctx, addr, waitLimit)
	assert.NilError(t, err)
	defer c.Close()
	out, err := c.Send(testkit.Transfer(t, guid, nil))
	assert.NilError(t, err)
	a, err := channel.Decode(out)
	assert.NilError(t, err)
	return a
}

// A started relay serves a transfer, answers /readyz, and a graceful stop
// leaves its row recorded and the ledger it opened closed (another can
// open the file and read the row).
func TestStartServesAndStops(t *testing.T) {
	db := filepath.Join(t.TempDir(), "relay.db")
	r, err := assemble.Start(context.Background(), assemble.Config{
		Listen: "127.0.0.1:0", Core: newCore(t), DB: db,
		Metrics: metrics.New(), MetricsAddr: "127.0.0.1:0",
	})
	assert.NilError(t, err)

	guid := testkit.GUID()
	a := transfer(t, r.Addr().String(), guid)
	assert.Equal(t, a.Code, generated.RspHTTP200)

	assert.Assert(t, r.MetricsAddr() != nil)
	resp, err := http.Get("http://" + r.MetricsAddr().String() + "/readyz")
	assert.NilError(t, err)
	resp.Body.Close()
	assert.Equal(t, resp.StatusCode, http.StatusOK)

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	assert.NilError(t, r.Stop(ctx))

	led, err := ledger.OpenExisting(db)
	assert.NilError(t, err)
	defer led.Close()
	row, err := led.Get(ctx, guid)
	assert.NilError(t, err)
	assert.Equal(t, row.State, ledger.StateDone)
	_, err = net.Dial("tcp", r.Addr().String())
	assert.Check(t, err != nil, "the relay still listens after Stop")
}

// A ledger the caller opened is shared, not owned: Stop leaves it open.
func TestSharedLedgerOutlivesTheRelay(t *testing.T) {
	led, err := ledger.Open(filepath.Join(t.TempDir(), "relay.db"))
	assert.NilError(t, err)
	defer led.Close()
	core := newCore(t)
	var relays []*assemble.Relay
	for range 2 {
		r, err := assemble.Start(context.Background(), assemble.Config{Listen: "127.0.0.1:0", Core: core, Ledger: led})
		assert.NilError(t, err)
		relays = append(relays, r)
	}
	guid := testkit.GUID()
	assert.Equal(t, transfer(t, relays[0].Addr().String(), guid).Code, generated.RspHTTP200)
	// The second relay finds the first one's row: the same answer, replayed.
	assert.Equal(t, transfer(t, relays[1].Addr().String(), guid).Code, generated.RspHTTP200)

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	for _, r := range relays {
		assert.NilError(t, r.Stop(ctx))
	}
	row, err := led.Get(ctx, guid)
	assert.NilError(t, err)
	assert.Equal(t, row.State, ledger.StateDone)
}

// What cannot be used at start is a bad setting (exit 2) naming its
// source, and nothing is left running: the relay's port is free again.
func TestStartRefusalsNameTheSetting(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer busy.Close()
	free := testkit.ClosedAddr(t)
	core := newCore(t)
	dir := t.TempDir()

	for _, tc := range []struct {
		name string
		cfg  assemble.Config
		want string
	}{
		{"port in use", assemble.Config{Listen: busy.Addr().String(), ListenFlag: "--port X", DB: filepath.Join(dir, "a.db")}, "--port X"},
		{"db in a missing directory", assemble.Config{Listen: free, ListenFlag: "--port X", DB: filepath.Join(dir, "missing", "a.db")}, "--db"},
		{"metrics port in use", assemble.Config{Listen: free, ListenFlag: "--port X", DB: filepath.Join(dir, "b.db"), Metrics: metrics.New(), MetricsAddr: busy.Addr().String()}, "--metrics-addr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Core = core
			_, err := assemble.Start(context.Background(), tc.cfg)
			assert.Assert(t, err != nil)
			assert.Check(t, app.IsBad(err), "%v", err)
			assert.Check(t, is.Contains(err.Error(), tc.want))
			ln, err := net.Listen("tcp", free)
			assert.NilError(t, err, "the relay's port is still held")
			ln.Close()
		})
	}
}
