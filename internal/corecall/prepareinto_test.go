package corecall_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/corecall"
	"lhrelay/internal/generated"
)

// A Prepared built again with PrepareInto gives the same calls and
// results as a new one, reusing its buffers: building the call allocates
// nothing, and a 200 decodes into the last one's body.
func TestPrepareIntoReusesItsBuffers(t *testing.T) {
	tx := bktr(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"guid":"%s","txId":"T%015d","balance":950000,"postedAt":"20261129103000"}`, r.Header.Get("X-Guid"), len(r.Header.Get("X-Guid")))
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, corecall.Config{BaseURL: srv.URL, Timeout: 10 * time.Second})
	ctx := context.Background()

	var p corecall.Prepared
	var last generated.ResponseBody
	for i := range 3 {
		g := fmt.Sprintf("%032x", i+1)
		fresh, err := corecall.Prepare(tx, g, transfer("rent"))
		assert.NilError(t, err)
		want := c.Send(ctx, fresh)
		assert.Equal(t, want.Source, generated.SourceHTTP200, "%v", want.Err)

		assert.NilError(t, corecall.PrepareInto(&p, tx, g, transfer("rent")))
		got := c.Send(ctx, &p)
		assert.Equal(t, got.Source, generated.SourceHTTP200, "%v", got.Err)
		assert.DeepEqual(t, got.Body, want.Body)
		if last != nil {
			assert.Assert(t, got.Body == last, "decoded into the last call's body")
		}
		last = got.Body
	}

	req := transfer("rent")
	allocs := testing.AllocsPerRun(50, func() {
		if err := corecall.PrepareInto(&p, tx, "0123456789abcdef0123456789abcdef", req); err != nil {
			t.Fatal(err)
		}
	})
	fresh := testing.AllocsPerRun(50, func() {
		if _, err := corecall.Prepare(tx, "0123456789abcdef0123456789abcdef", req); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("allocations: PrepareInto %v, Prepare %v", allocs, fresh)
	assert.Equal(t, allocs, fresh-2, "the Prepared and its JSON body are reused")
}
