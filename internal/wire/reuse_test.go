package wire_test

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/fixedwidth"
	"lhrelay/internal/generated"
	"lhrelay/internal/wire"
)

// TestParseRequestIntoReusesTheBody: a body of the frame's transaction is
// decoded into, whatever it held; another transaction's is left alone.
func TestParseRequestIntoReusesTheBody(t *testing.T) {
	frame := transferFrame(t)
	want, err := wire.ParseRequest(frame)
	assert.NilError(t, err)

	reuse := &generated.BKTR0001Request{WdBank: "088", Memo: "stale"}
	got, err := wire.ParseRequestInto(frame, reuse)
	assert.NilError(t, err)
	assert.Assert(t, got.Body == generated.RequestBody(reuse), "the body given was decoded into")
	sameRequest(t, got, want)

	other := &generated.BKIQ0001Request{Bank: "081", Acct: "1"}
	got, err = wire.ParseRequestInto(frame, other)
	assert.NilError(t, err)
	assert.Assert(t, got.Body != generated.RequestBody(other), "another transaction's body is not used")
	sameRequest(t, got, want)
	assert.Equal(t, *other, generated.BKIQ0001Request{Bank: "081", Acct: "1"})
}

func sameRequest(t *testing.T, got, want wire.Request) {
	t.Helper()
	assert.Equal(t, got.Header, want.Header)
	assert.Equal(t, got.Tx, want.Tx)
	assert.DeepEqual(t, got.Body, want.Body)
}

// TestSentAtOfEverySecond: SENT_AT, formatted once a second and location,
// is always the answer's own instant.
func TestSentAtOfEverySecond(t *testing.T) {
	req, err := wire.ParseRequest(transferFrame(t))
	assert.NilError(t, err)
	east := time.FixedZone("east", 9*3600)
	base := time.Date(2026, 11, 29, 23, 59, 58, 0, time.UTC)
	for _, at := range []time.Time{
		base, base.Add(300 * time.Millisecond), base.In(east), base.Add(time.Second), base.Add(1500 * time.Millisecond),
		base.Add(2 * time.Second).In(east), base.Add(2 * time.Second), base,
	} {
		h := wire.ResponseHeader(&req.Header, generated.RspHTTP200, at)
		assert.Equal(t, h.SentAt, fixedwidth.FormatTimestamp(at), "%v", at)
		out := wire.AppendRejection(nil, transferFrame(t), generated.RspBadFrame, at)
		assert.Equal(t, generated.RawHeader(out).SentAt, fixedwidth.FormatTimestamp(at), "%v", at)
	}
}
