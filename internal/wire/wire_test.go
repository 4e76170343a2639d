package wire_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
	"lhrelay/internal/wire"
)

const guid = "0123456789abcdef0123456789abcdef"

var now = time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC)

func transferFrame(t *testing.T) []byte {
	t.Helper()
	h := generated.Header{TxCode: "BKTR0001", GUID: guid, Flag: generated.FlagRequest, SrcOrg: "081", DstOrg: "999", SentAt: "20261129103000"}
	body := &generated.BKTR0001Request{WdBank: "081", WdAcct: "11002003004005", DpBank: "004", DpAcct: "22003004005006", Amount: 50000, Memo: "rent"}
	f, err := generated.AppendFrame(nil, &h, body)
	assert.NilError(t, err)
	return f
}

func TestReadFrameOneByteAtATime(t *testing.T) {
	f := transferFrame(t)
	got, err := wire.ReadFrame(iotest.OneByteReader(bytes.NewReader(f)), nil)
	assert.NilError(t, err)
	assert.DeepEqual(t, got, f)
}

func TestReadFrameSeveralInOneStream(t *testing.T) {
	f := transferFrame(t)
	short := []byte("0003abc") // LEN below the header: still delimited by LEN
	stream := bytes.NewReader(append(append(append([]byte{}, f...), short...), f...))
	var buf []byte
	for _, want := range [][]byte{f, short, f} {
		got, err := wire.ReadFrame(stream, buf)
		assert.NilError(t, err)
		assert.DeepEqual(t, got, want)
		buf = got[:0]
	}
	_, err := wire.ReadFrame(stream, buf)
	assert.Equal(t, err, io.EOF)
}

func TestReadFrameReusesBuffer(t *testing.T) {
	f := transferFrame(t)
	buf := make([]byte, 0, 512)
	got, err := wire.ReadFrame(bytes.NewReader(f), buf)
	assert.NilError(t, err)
	assert.Equal(t, &got[0], &buf[:1][0], "a large enough buffer is used as is")
}

func TestReadFrameLargest(t *testing.T) {
	f := append([]byte("9999"), bytes.Repeat([]byte{'x'}, generated.MaxFrameLen)...)
	got, err := wire.ReadFrame(iotest.HalfReader(bytes.NewReader(f)), nil)
	assert.NilError(t, err)
	assert.Equal(t, len(got), generated.PrefixLen+generated.MaxFrameLen)
}

func TestReadFrameZeroLength(t *testing.T) {
	got, err := wire.ReadFrame(strings.NewReader("0000"), nil)
	assert.NilError(t, err)
	assert.Equal(t, string(got), "0000")
}

func TestReadFrameEOF(t *testing.T) {
	f := transferFrame(t)
	for _, tc := range []struct {
		name  string
		input []byte
		want  error
	}{
		{"empty stream", nil, io.EOF},
		{"inside the prefix", f[:2], io.ErrUnexpectedEOF},
		{"after the prefix", f[:generated.PrefixLen], io.ErrUnexpectedEOF},
		{"inside the header", f[:40], io.ErrUnexpectedEOF},
		{"inside the body", f[:len(f)-1], io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := wire.ReadFrame(iotest.OneByteReader(bytes.NewReader(tc.input)), nil)
			assert.Equal(t, err, tc.want)
			assert.Equal(t, string(got), string(tc.input))
		})
	}
}

func TestReadFrameReadError(t *testing.T) {
	boom := errors.New("boom")
	f := transferFrame(t)
	r := io.MultiReader(bytes.NewReader(f[:50]), iotest.ErrReader(boom))
	_, err := wire.ReadFrame(r, nil)
	assert.ErrorIs(t, err, boom)
}

func TestReadFramePrefixNotDigits(t *testing.T) {
	for _, p := range []string{"12a4", " 123", "+123", "-123", "0x10", "\x000001", "１２"} {
		t.Run(p, func(t *testing.T) {
			got, err := wire.ReadFrame(strings.NewReader(p+strings.Repeat("0", 200)), nil)
			var pe *wire.PrefixError
			assert.Assert(t, errors.As(err, &pe), "err %v", err)
			assert.Equal(t, string(pe.Prefix), p[:generated.PrefixLen])
			assert.Equal(t, string(got), p[:generated.PrefixLen])
			assert.ErrorContains(t, err, "not 4 ASCII digits")
		})
	}
}

func TestAppendRejection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame string
		want  string // header positions 4..55 of the answer
	}{
		{"nothing", "", strings.Repeat(" ", 8+32) + "R" + "      " + "E102"},
		{"prefix only", "00a1", strings.Repeat(" ", 8+32) + "R" + "      " + "E102"},
		{"short", "0010BKTR00", "BKTR00  " + strings.Repeat(" ", 32) + "R" + "      " + "E102"},
		{"garbage", "0100BK\x00\xffR0001" + guid + "SABCDEF", "BK  R000" + "1" + guid[:31] + "R" + "CDESAB" + "E102"},
		{"orgs cut", "0100BKTR0001" + guid + "S08", "BKTR0001" + guid + "R" + "   08 " + "E102"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := wire.AppendRejection([]byte("keep"), []byte(tc.frame), generated.RspBadFrame, now)
			assert.Equal(t, string(out[:4]), "keep", "appends")
			out = out[4:]
			assert.Equal(t, len(out), generated.HeaderLen)
			assert.Equal(t, string(out[:generated.PrefixLen]), "0076")
			assert.Equal(t, string(out[4:55]), tc.want)
			assert.Equal(t, string(out[55:69]), "20261129103000")
			assert.Equal(t, string(out[69:]), strings.Repeat(" ", 11))
		})
	}
}

func TestAppendResponse(t *testing.T) {
	req := generated.Header{TxCode: "BKTR0001", GUID: guid, Flag: generated.FlagRequest, SrcOrg: "081", DstOrg: "999", SentAt: "20261129100000"}
	body := &generated.BKTR0001Response{CoreTxid: "T000000000000001", Balance: 950000, PostedAt: "20261129103000"}

	out, err := wire.AppendResponse(nil, &req, generated.RspHTTP200, body, now)
	assert.NilError(t, err)
	assert.Equal(t, len(out), generated.HeaderLen+generated.BKTR0001ResponseLen)
	var h generated.Header
	assert.NilError(t, h.Decode(string(out[:generated.HeaderLen])))
	assert.DeepEqual(t, h, generated.Header{Len: generated.MinFrameLen + generated.BKTR0001ResponseLen, TxCode: "BKTR0001", GUID: guid, Flag: generated.FlagResponse, SrcOrg: "999", DstOrg: "081", RspCode: "0000", SentAt: "20261129103000"})
	var rb generated.BKTR0001Response
	assert.NilError(t, rb.Decode(string(out[generated.HeaderLen:])))
	assert.DeepEqual(t, &rb, body)

	// Any other code: no body, even if one is given.
	out, err = wire.AppendResponse(nil, &req, generated.RspReadTimeout, body, now)
	assert.NilError(t, err)
	assert.Equal(t, len(out), generated.HeaderLen)
	assert.Equal(t, string(out[:4]), "0076")
	assert.Equal(t, string(out[51:55]), "E901")

	_, err = wire.AppendResponse(nil, &req, generated.RspHTTP200, nil, now)
	assert.ErrorContains(t, err, "needs a body")
}
