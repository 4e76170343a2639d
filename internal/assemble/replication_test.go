package assemble_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/poll"

	"lhrelay/internal/app"
	"lhrelay/internal/assemble"
	"lhrelay/internal/generated"
	"lhrelay/internal/metrics"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A WAL archiver (pg_receivewal) streaming from the ledger's primary is
// not a standby: the relay starts, is ready and serves. A standby attached
// beside it is: a relay started then is refused (SPEC 6a), naming the
// setting.
func TestStartBesideAnArchiver(t *testing.T) {
	srv := pgtest.NewServer(t, pgtest.Options{})
	srv.StartClient(t, "pg_receivewal", "-D", srv.ScratchDir(t), "--no-sync", "-n")
	ctx := context.Background()
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		c, err := pgtest.Connect(ctx, srv.AdminURL())
		if err != nil {
			return poll.Error(err)
		}
		defer c.Close(ctx)
		var n int
		// Until it reports where it has written, an archiver could be a
		// standby about to report: it counts as one.
		if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE application_name = 'pg_receivewal' AND write_lsn IS NOT NULL`).Scan(&n); err != nil {
			return poll.Error(err)
		}
		if n != 1 {
			return poll.Continue("pg_receivewal has not reported yet")
		}
		return poll.Success()
	}, poll.WithTimeout(60*time.Second), poll.WithDelay(50*time.Millisecond))

	db := srv.URL(t)
	core := newCore(t)
	r, err := assemble.Start(ctx, assemble.Config{Listen: "127.0.0.1:0", Core: core, DB: db, Metrics: metrics.New(), MetricsAddr: "127.0.0.1:0"})
	assert.NilError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		r.Stop(ctx)
	})
	resp, err := http.Get("http://" + r.MetricsAddr().String() + "/readyz")
	assert.NilError(t, err)
	resp.Body.Close()
	assert.Equal(t, resp.StatusCode, http.StatusOK)
	assert.Equal(t, transfer(t, r.Addr().String(), testkit.GUID()).Code, generated.RspHTTP200)

	srv.NewStandby(t)
	_, err = assemble.Start(ctx, assemble.Config{Listen: "127.0.0.1:0", Core: core, DB: db})
	assert.Assert(t, app.IsBad(err), "%v", err)
	assert.Check(t, is.Contains(err.Error(), "synchronous_standby_names"))
}
