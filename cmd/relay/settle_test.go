package main

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/channel"
	"lhrelay/internal/coresim"
	"lhrelay/internal/generated"
)

// TestRelaySettlesItsOwnUnknowns: a transfer the core posted but answered
// too late is E901 and UNKNOWN; the relay's settling looks it up by itself
// and makes it DONE, and the channel's retry gets 0000 with the stored
// body. The core saw one POST and one lookup.
func TestRelaySettlesItsOwnUnknowns(t *testing.T) {
	guid := channel.NewGUID()
	sim := coresim.New(coresim.Config{})
	release := make(chan struct{})
	var posts, lookups atomic.Int32
	core := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost:
			posts.Add(1)
			// Posted at once, answered late: the relay gives up first.
			rec := httptest.NewRecorder()
			sim.ServeHTTP(rec, r)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case r.Method == http.MethodGet && r.URL.Path == "/v1/transfers/"+guid:
			lookups.Add(1)
			sim.ServeHTTP(w, r)
		default:
			sim.ServeHTTP(w, r)
		}
	})
	t.Cleanup(func() { close(release) })
	r := startRunCore(t, core, "--timeout", "0.3", "--settle-every", "0.05", "--settle-min-age", "0", "--stale-sent", "0")
	r.drain()
	settled := r.stderr.When("done=1")

	a, err := channel.Decode(sendTransfer(t, r.addr, guid))
	assert.NilError(t, err)
	assert.Equal(t, a.Code, generated.SourceReadTimeout.Code())
	select {
	case <-settled:
	case <-time.After(10 * time.Second):
		t.Fatalf("the relay did not settle the row; log:\n%s", r.stderr.String())
	}

	a, err = channel.Decode(sendTransfer(t, r.addr, guid))
	assert.NilError(t, err)
	assert.Equal(t, a.Code, generated.SourceHTTP200.Code(), "the retry gets the settled answer")
	assert.Assert(t, a.Body != nil)
	assert.Equal(t, posts.Load(), int32(1))
	assert.Equal(t, lookups.Load(), int32(1))
	r.stopAndWait(t)
}

func TestSettleArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--timeout", "5", "--stale-sent", "9"}, "--stale-sent 9s: must be more than --timeout plus 5s (10s)"},
		{[]string{"--settle-every", "-1"}, "negative duration"},
	} {
		_, err := parseArgs(tc.args, nil)
		assert.ErrorContains(t, err, tc.want)
	}
	o, err := parseArgs([]string{"--settle-every", "0", "--stale-sent", "1"}, nil)
	assert.NilError(t, err, "with settling off, --stale-sent is not checked")
	assert.Equal(t, o.settle.every, time.Duration(0))
	o, err = parseArgs(nil, nil)
	assert.NilError(t, err)
	assert.Equal(t, o.settle.every, 30*time.Second)
	assert.Equal(t, o.settle.minAge, 60*time.Second)
	assert.Equal(t, o.settle.staleSent, 600*time.Second)
}
