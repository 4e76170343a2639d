package channel_test

import (
	"context"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/channel"
	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
)

func TestParseHex(t *testing.T) {
	ok := []struct {
		in   string
		want string
	}{
		{"30313233", "0123"},
		{"0x3031", "01"},
		{"  30 31\n32\t33  ", "0123"},
		{"4a4B", "JK"},
		{"00ff", "\x00\xff"},
	}
	for _, tc := range ok {
		got, err := channel.ParseHex(tc.in)
		assert.NilError(t, err, tc.in)
		assert.Equal(t, string(got), tc.want, tc.in)
	}
	bad := []struct{ in, want string }{
		{"303", "odd number of digits (3)"},
		{"30 3g", `'g' (character 5) is not a hex digit`},
		{"  0xzz", `'z' (character 5)`},
		{"", "no bytes"},
		{"0x", "no bytes"},
	}
	for _, tc := range bad {
		_, err := channel.ParseHex(tc.in)
		assert.ErrorContains(t, err, tc.want, tc.in)
	}
}

func TestProbeGarbage(t *testing.T) {
	r := testkit.Start(t, nil)
	res, err := channel.Probe(context.Background(), r.Addr, []byte("ZZZZhello"), time.Second)
	assert.NilError(t, err)
	assert.Equal(t, len(res.Frames), 1)
	a, err := channel.Decode(res.Frames[0])
	assert.NilError(t, err)
	assert.Equal(t, a.Code, generated.RspBadFrame)
	assert.Equal(t, a.Header.TxCode, "") // SPEC §5.1: a bad prefix leaves TX_CODE and GUID blank
	assert.Equal(t, a.Header.GUID, "")
}

func TestProbeFrameThenCutOff(t *testing.T) {
	r := testkit.Start(t, nil)
	frame, _ := channel.BuildRequest("BKTR0001", guid, bktrFields, time.Now())
	// A good frame, then a frame cut short by the half-close.
	data := append(append([]byte{}, frame...), frame[:20]...)
	res, err := channel.Probe(context.Background(), r.Addr, data, time.Second)
	assert.NilError(t, err)
	assert.Equal(t, len(res.Frames), 1)
	assert.NilError(t, res.End)
	assert.Equal(t, len(res.Rest), 0)
}

func TestProbeTrailingBytesFromRelay(t *testing.T) {
	r := testkit.Start(t, func(f []byte) []byte {
		return append(testkit.Answer0000(f), "0xyz"...)
	})
	frame, _ := channel.BuildRequest("BKTR0001", guid, bktrFields, time.Now())
	res, err := channel.Probe(context.Background(), r.Addr, frame, time.Second)
	assert.NilError(t, err)
	assert.Equal(t, len(res.Frames), 1)
	assert.Equal(t, string(res.Rest), "0xyz")
}

func TestProbeUnreachable(t *testing.T) {
	_, err := channel.Probe(context.Background(), refusedAddr(t), []byte("x"), time.Second)
	assert.ErrorContains(t, err, "cannot reach relay")
}
