package main

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/channel"
	"lhrelay/internal/corecall"
	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
	"lhrelay/internal/ledger"
	"lhrelay/internal/outcome"
	"lhrelay/internal/testkit"
	"lhrelay/internal/wire"
)

// TestRelaySettlerAtWrongPath: the core serves its API below /core and the
// relay is given its root, so every lookup answers 404. A transfer the core
// posted, left UNKNOWN on the ledger (by a relay whose answer came too
// late), must not be settled "never posted": the relay's settler leaves it
// UNKNOWN and logs an error naming --core, and the channel's retry is
// answered E901 from the row without reaching the core. The core posted
// it once.
func TestRelaySettlerAtWrongPath(t *testing.T) {
	sim := coresim.New(coresim.Config{})
	mux := http.NewServeMux()
	mux.Handle("/core/", http.StripPrefix("/core", sim))
	r := startRunCore(t, mux, "--settle-every", "0.05", "--settle-min-age", "0", "--stale-sent", "0", "--metrics-addr", "127.0.0.1:0")
	assert.Assert(t, r.lines.Scan(), "no metrics line; stderr:\n%s", r.stderr.String())
	metricsURL, _ := strings.CutPrefix(r.lines.Text(), "metrics listening on ")
	r.drain()
	refused := r.stderr.When("settling: a lookup's 404 is not trusted")

	ctx := context.Background()
	guid := channel.NewGUID()
	frame := testkit.Transfer(t, guid, map[string]string{"wdAcct": "11002003004005", "dpBank": "004", "dpAcct": "22003004005006", "memo": "cmd test"})
	req, err := wire.ParseRequest(frame)
	assert.NilError(t, err)
	right, err := corecall.New(corecall.Config{BaseURL: r.coreURL + "/core"})
	assert.NilError(t, err)
	res := right.Call(ctx, req.Tx, guid, req.Body)
	assert.Equal(t, res.Source, generated.SourceHTTP200, "%v", res.Err)
	l, err := ledger.Open(r.db)
	assert.NilError(t, err)
	defer l.Close()
	claim, err := l.Claim(ctx, ledger.Request{GUID: guid, TxCode: req.Tx.Code, Frame: frame, Body: frame[generated.HeaderLen:]})
	assert.NilError(t, err)
	assert.Equal(t, claim.Outcome, ledger.Owned)
	rec, _ := outcome.OfCall(nil, &req.Header, corecall.Result{Source: generated.SourceReadTimeout}, time.Now())
	assert.NilError(t, l.Finish(ctx, guid, 1, rec))

	select {
	case <-refused:
	case <-time.After(10 * time.Second):
		t.Fatalf("no settling round refused the 404; log:\n%s", r.stderr.String())
	}
	log := r.stderr.String()
	assert.Assert(t, strings.Contains(log, "level=ERROR"), log)
	assert.Assert(t, strings.Contains(log, "check that --core "+r.coreURL+" is the core's base URL"), log)
	_, metrics := httpGet(t, metricsURL+"/metrics")
	unverified := regexp.MustCompile(`(?m)^lhrelay_settle_rows_total\{outcome="unverified"\} ([0-9]+)$`).FindStringSubmatch(metrics)
	assert.Assert(t, unverified != nil && unverified[1] != "0", "the rows left are counted: %v", unverified)
	row, err := l.Get(ctx, guid)
	assert.NilError(t, err)
	assert.Equal(t, row.State, ledger.StateUnknown)

	a, err := channel.Decode(sendTransfer(t, r.addr, guid))
	assert.NilError(t, err)
	assert.Equal(t, a.Code, generated.SourceReadTimeout.Code(), "the retry is answered from the UNKNOWN row")
	assert.Equal(t, sim.PostCount(guid), 1)
	r.stopAndWait(t)
}

// TestRelaySettlerTrustLookup404: a core that answers the lookup of an
// unknown transfer exactly as a path it does not serve (404 {"error":"not
// found"} for both) gives the relay's settler no evidence that its 404s
// are the lookup's; with --trust-lookup-404, the operator's word, they
// settle the row as resolve's do: FAILED/E902.
func TestRelaySettlerTrustLookup404(t *testing.T) {
	sim := coresim.New(coresim.Config{})
	alike := testkit.FrameworkNotFound(sim, testkit.Fixed(`{"error":"not found"}`), testkit.Fixed(`{"error":"not found"}`))
	r := startRunCore(t, alike, "--settle-every", "0.05", "--settle-min-age", "0", "--stale-sent", "0", "--trust-lookup-404")
	r.drain()
	settled := r.stderr.When("failed=1")

	ctx := context.Background()
	guid := channel.NewGUID()
	frame := testkit.Transfer(t, guid, nil)
	req, err := wire.ParseRequest(frame)
	assert.NilError(t, err)
	l, err := ledger.Open(r.db)
	assert.NilError(t, err)
	defer l.Close()
	claim, err := l.Claim(ctx, ledger.Request{GUID: guid, TxCode: req.Tx.Code, Frame: frame, Body: frame[generated.HeaderLen:]})
	assert.NilError(t, err)
	assert.Equal(t, claim.Outcome, ledger.Owned)
	rec, _ := outcome.OfCall(nil, &req.Header, corecall.Result{Source: generated.SourceReadTimeout}, time.Now())
	assert.NilError(t, l.Finish(ctx, guid, 1, rec))

	select {
	case <-settled:
	case <-time.After(10 * time.Second):
		t.Fatalf("the relay did not settle the row; log:\n%s", r.stderr.String())
	}
	row, err := l.Get(ctx, guid)
	assert.NilError(t, err)
	assert.Equal(t, row.State, ledger.StateFailed)
	assert.Equal(t, row.RspCode, string(generated.SourceConnectFail.Code()))
	assert.Assert(t, strings.Contains(r.stderr.String(), "trust_lookup_404=true"), r.stderr.String())
	r.stopAndWait(t)
}
