package coresim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/coresim"
	"lhrelay/internal/testkit"
)

// TestArrivedHoldsAtTheDoor: the arrival hook sees a request before the
// core does anything with it. A request held there is announced, neither
// counted nor posted until let through; one whose caller leaves while it
// is held is never served.
func TestArrivedHoldsAtTheDoor(t *testing.T) {
	g := testkit.NewGate(2)
	defer g.Open()
	sim, url := start(t, coresim.Config{Arrived: g.Hold})

	// The caller leaves while its transfer is held: never posted.
	left := guid(1)
	ctx, cancel := context.WithCancel(t.Context())
	gone := make(chan error, 1)
	go func() { gone <- postCtx(ctx, url, transfer(left, 1000, "rent")) }()
	assert.Equal(t, g.WaitArrival(t), left)
	assert.Equal(t, sim.Stats().Calls, 0, "held at the door: not received yet")
	cancel()
	assert.ErrorIs(t, <-gone, context.Canceled)
	assert.Equal(t, g.WaitLeft(t), left)

	// A held transfer is posted once the gate opens.
	held := guid(2)
	answered := make(chan answer, 1)
	go func() { answered <- post(t, url, transfer(held, 1000, "rent")) }()
	assert.Equal(t, g.WaitArrival(t), held)
	assert.Assert(t, !sim.Posted(held))
	g.Open()
	a := <-answered
	assert.Equal(t, a.status, http.StatusOK, a.raw)
	assert.Assert(t, sim.Posted(held))
	assert.Assert(t, !sim.Posted(left), "a request whose caller left at the door was served")
	assert.Equal(t, sim.Stats().Calls, 1)
}

// postCtx posts body as a transfer with ctx, and returns the error only.
func postCtx(ctx context.Context, url string, body map[string]any) error {
	j, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/transfers", bytes.NewReader(j))
	if err != nil {
		return err
	}
	req.Header.Set("X-GUID", body["guid"].(string))
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}
