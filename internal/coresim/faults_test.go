package coresim_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/coresim"
)

// lockedBuffer is a truth log the test can read while the server writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) events(t *testing.T) []coresim.TruthEvent {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var evs []coresim.TruthEvent
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	for sc.Scan() {
		var e coresim.TruthEvent
		assert.NilError(t, json.Unmarshal(sc.Bytes(), &e))
		evs = append(evs, e)
	}
	return evs
}

// TestFaults: each armed fault changes one transfer as documented, posts
// it or not, and the truth log says which; the next transfer is normal.
func TestFaults(t *testing.T) {
	for _, tc := range []struct {
		fault  coresim.Fault
		status int  // 0: no answer (the connection is cut)
		posted bool // the core posted it
		check  func(t *testing.T, g string, body []byte)
	}{
		{fault: coresim.FaultDelay, status: http.StatusOK, posted: true},
		{fault: coresim.Fault500, status: http.StatusInternalServerError},
		{fault: coresim.Fault504Posted, status: http.StatusGatewayTimeout, posted: true},
		{fault: coresim.FaultResetPosted, posted: true},
		{fault: coresim.FaultResetUnposted},
		{fault: coresim.FaultGarbledPosted, status: http.StatusOK, posted: true, check: func(t *testing.T, _ string, body []byte) {
			assert.Assert(t, !json.Valid(body), "%s", body)
		}},
		{fault: coresim.FaultOtherGUIDPosted, status: http.StatusOK, posted: true, check: func(t *testing.T, g string, body []byte) {
			var a struct{ GUID, TxID string }
			assert.NilError(t, json.Unmarshal(body, &a))
			assert.Assert(t, a.GUID != g && len(a.GUID) == len(g), a.GUID)
			assert.Check(t, a.TxID != "T000000000000001", "another transfer's id")
		}},
	} {
		t.Run(string(tc.fault), func(t *testing.T) {
			var truth lockedBuffer
			sim, url := start(t, coresim.Config{Truth: &truth})
			sim.Arm(tc.fault, 1, 10*time.Millisecond)
			g := guid(1)
			b, _ := json.Marshal(transfer(g, 100, "x"))
			req, _ := http.NewRequest(http.MethodPost, url+"/v1/transfers", bytes.NewReader(b))
			req.Header.Set("X-GUID", g)
			resp, err := http.DefaultClient.Do(req)
			if tc.status == 0 {
				assert.Assert(t, err != nil, "the connection should have been cut")
			} else {
				assert.NilError(t, err)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				assert.Equal(t, resp.StatusCode, tc.status)
				if tc.check != nil {
					tc.check(t, g, body)
				}
			}
			assert.Equal(t, sim.Posted(g), tc.posted)

			evs := truth.events(t)
			assert.Assert(t, len(evs) >= 1)
			assert.Check(t, is.Equal(evs[0].Ev, coresim.TruthArrive))
			assert.Check(t, is.Equal(evs[0].Fault, tc.fault))
			if tc.posted {
				assert.Assert(t, is.Len(evs, 2))
				assert.Check(t, is.Equal(evs[1].Ev, coresim.TruthPosted))
				assert.Check(t, is.Equal(string(evs[1].Request), string(b)))
			} else {
				assert.Check(t, is.Len(evs, 1))
			}

			// Spent: the next transfer is served as usual.
			g2 := guid(2)
			a := post(t, url, transfer(g2, 100, "x"))
			assert.Equal(t, a.status, http.StatusOK)
		})
	}
}

// TestFaultHang: a hung transfer ends when its caller goes, posting nothing.
func TestFaultHang(t *testing.T) {
	sim, url := start(t, coresim.Config{})
	sim.Arm(coresim.FaultHang, 1, 0)
	g := guid(1)
	b, _ := json.Marshal(transfer(g, 100, "x"))
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/transfers", bytes.NewReader(b))
	req.Header.Set("X-GUID", g)
	c := &http.Client{Timeout: 200 * time.Millisecond}
	_, err := c.Do(req)
	assert.Assert(t, err != nil)
	assert.Check(t, !sim.Posted(g))
}

// TestLookupOtherGUID: an armed lookup answers 200 about another GUID,
// whether or not this one was posted; the truth log records the answer.
func TestLookupOtherGUID(t *testing.T) {
	var truth lockedBuffer
	sim, url := start(t, coresim.Config{Truth: &truth})
	posted := guid(1)
	assert.Equal(t, post(t, url, transfer(posted, 100, "")).status, http.StatusOK)
	sim.Arm(coresim.FaultLookupOtherGUID, 2, 0)
	for _, g := range []string{posted, guid(2)} {
		resp, err := http.Get(url + "/v1/transfers/" + g)
		assert.NilError(t, err)
		var a struct{ GUID string }
		assert.NilError(t, json.NewDecoder(resp.Body).Decode(&a))
		resp.Body.Close()
		assert.Equal(t, resp.StatusCode, http.StatusOK, g)
		assert.Assert(t, a.GUID != g, g)
	}
	resp, err := http.Get(url + "/v1/transfers/" + guid(2))
	assert.NilError(t, err)
	resp.Body.Close()
	assert.Equal(t, resp.StatusCode, http.StatusNotFound, "spent after two lookups")

	var lookups []coresim.TruthEvent
	for _, e := range truth.events(t) {
		if e.Ev == coresim.TruthLookup {
			lookups = append(lookups, e)
		}
	}
	assert.Assert(t, is.Len(lookups, 3))
	assert.Check(t, is.Equal(lookups[0].Fault, coresim.FaultLookupOtherGUID))
	assert.Check(t, is.Equal(lookups[2].Status, http.StatusNotFound))
}

// TestControlHandler: the controls arm, disarm and count over HTTP, and
// refuse an unknown fault.
func TestControlHandler(t *testing.T) {
	sim, url := start(t, coresim.Config{})
	refused := make(chan time.Duration, 1)
	ctl := httptest.NewServer(sim.ControlHandler(func(d time.Duration) error { refused <- d; return nil }))
	t.Cleanup(ctl.Close)
	postCtl := func(q string) int {
		resp, err := http.Post(ctl.URL+q, "", nil)
		assert.NilError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, postCtl("/arm?fault=nonsense"), http.StatusBadRequest)
	armed := func() string {
		resp, err := http.Get(ctl.URL + "/armed")
		assert.NilError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(b))
	}
	assert.Equal(t, postCtl("/arm?fault=500&n=2"), http.StatusNoContent)
	assert.Equal(t, postCtl("/arm?fault="+string(coresim.FaultLookupOtherGUID)), http.StatusNoContent)
	assert.Equal(t, armed(), `{"transfers":2,"lookups":1}`)
	assert.Equal(t, post(t, url, transfer(guid(1), 100, "")).status, http.StatusInternalServerError)
	assert.Equal(t, armed(), `{"transfers":1,"lookups":1}`, "one transfer spent one")
	assert.Equal(t, postCtl("/disarm"), http.StatusNoContent)
	assert.Equal(t, armed(), `{"transfers":0,"lookups":0}`)
	assert.Equal(t, post(t, url, transfer(guid(2), 100, "")).status, http.StatusOK)

	assert.Equal(t, postCtl("/service?each=x"), http.StatusBadRequest)
	assert.Equal(t, postCtl("/service?each=1ms&for=1h"), http.StatusNoContent)
	assert.Equal(t, postCtl("/refuse?for=250ms"), http.StatusNoContent)
	assert.Equal(t, <-refused, 250*time.Millisecond)

	resp, err := http.Get(ctl.URL + "/inflight")
	assert.NilError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, strings.TrimSpace(string(b)), "0")
}

// TestInFlightOfGUID: the control counts the POSTs of one GUID being
// handled.
func TestInFlightOfGUID(t *testing.T) {
	var truth lockedBuffer
	sim, url := start(t, coresim.Config{Truth: &truth})
	ctl := httptest.NewServer(sim.ControlHandler(nil))
	t.Cleanup(ctl.Close)
	sim.Arm(coresim.FaultHang, 1, 0) // held until its caller gives up
	g := guid(1)
	b, _ := json.Marshal(transfer(g, 100, "x"))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/transfers", bytes.NewReader(b))
	req.Header.Set("X-GUID", g)
	done := make(chan struct{})
	go func() { defer close(done); _, _ = http.DefaultClient.Do(req) }()
	t.Cleanup(func() { cancel(); <-done })
	of := func(g string) string {
		resp, err := http.Get(ctl.URL + "/inflight?guid=" + g)
		assert.NilError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(b))
	}
	deadline := time.Now().Add(5 * time.Second)
	for of(g) != "1" {
		assert.Assert(t, time.Now().Before(deadline), "the POST never arrived")
		time.Sleep(time.Millisecond) // polling the count under test
	}
	assert.Equal(t, of(guid(2)), "0")
}

// TestLookupDuringPost: a lookup answered while a POST of the same GUID is
// still being handled says so in the truth log; one after it does not.
func TestLookupDuringPost(t *testing.T) {
	var truth lockedBuffer
	sim, url := start(t, coresim.Config{Truth: &truth})
	sim.Arm(coresim.FaultHang, 1, 0) // held until its caller gives up
	g := guid(1)
	b, _ := json.Marshal(transfer(g, 100, "x"))
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/transfers", bytes.NewReader(b))
	req.Header.Set("X-GUID", g)
	c := &http.Client{Timeout: 2 * time.Second}
	go func() { _, _ = c.Do(req) }()
	deadline := time.Now().Add(5 * time.Second)
	for sim.InFlight() == 0 {
		assert.Assert(t, time.Now().Before(deadline), "the POST never arrived")
		time.Sleep(time.Millisecond)
	}
	resp, err := http.Get(url + "/v1/transfers/" + g)
	assert.NilError(t, err)
	resp.Body.Close()
	resp, err = http.Get(url + "/v1/transfers/" + guid(2))
	assert.NilError(t, err)
	resp.Body.Close()

	var during []bool
	for _, e := range truth.events(t) {
		if e.Ev == coresim.TruthLookup {
			during = append(during, e.DuringPost)
		}
	}
	assert.DeepEqual(t, during, []bool{true, false})
}
