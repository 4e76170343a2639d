package channel_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"lhrelay/internal/channel"
	"lhrelay/internal/generated"
	"lhrelay/internal/wire"
)

var answeredAt = time.Date(2026, 11, 29, 10, 30, 1, 0, time.Local)

func reqHeader(t *testing.T) generated.Header {
	t.Helper()
	var h generated.Header
	assert.NilError(t, h.Decode(bktrFrame[:generated.HeaderLen]))
	return h
}

func TestDecodeSuccess(t *testing.T) {
	h := reqHeader(t)
	body := &generated.BKTR0001Response{CoreTxid: "T000000000000001", Balance: 950000, PostedAt: "20261129103001"}
	frame, err := wire.AppendResponse(nil, &h, generated.RspHTTP200, body, answeredAt)
	assert.NilError(t, err)
	// By hand from SPEC §1: orgs swapped, FLAG R, code set, body 45 bytes.
	assert.Equal(t, string(frame), "0121"+"BKTR0001"+guid+"R"+"999"+"081"+"0000"+"20261129103001"+"           "+
		"T000000000000001"+"000000000950000"+"20261129103001")

	a, err := channel.Decode(frame)
	assert.NilError(t, err)
	assert.Equal(t, a.Code, generated.RspHTTP200)
	assert.Equal(t, a.Header.GUID, guid)
	assert.Equal(t, a.Header.SrcOrg, "999")
	assert.DeepEqual(t, a.Body, generated.ResponseBody(body))

	var text strings.Builder
	assert.NilError(t, a.WriteText(&text))
	assert.Equal(t, squeeze(text.String()), squeeze(`LEN 121
TX_CODE BKTR0001
GUID `+guid+`
FLAG R
SRC_ORG 999
DST_ORG 081
RSP_CODE 0000 posted; the body carries the result
SENT_AT 20261129103001
CORE_TXID T000000000000001
BALANCE 950000
POSTED_AT 20261129103001
`))

	out, err := json.Marshal(a)
	assert.NilError(t, err)
	var j map[string]any
	assert.NilError(t, json.Unmarshal(out, &j))
	assert.Equal(t, j["rspCode"], "0000")
	assert.Equal(t, j["meaning"], "posted; the body carries the result")
	assert.DeepEqual(t, j["body"], map[string]any{"txId": "T000000000000001", "balance": 950000.0, "postedAt": "20261129103001"})
}

func TestDecodeRejections(t *testing.T) {
	h := reqHeader(t)
	frame, err := wire.AppendResponse(nil, &h, generated.RspInsufficientFunds, nil, answeredAt)
	assert.NilError(t, err)
	a, err := channel.Decode(frame)
	assert.NilError(t, err)
	assert.Equal(t, a.Code, generated.RspInsufficientFunds)
	assert.Assert(t, a.Body == nil)
	assert.Equal(t, a.Meaning(), "rejected by the core: insufficient funds")

	// The answer to garbage echoes raw bytes where TX_CODE and GUID go (SPEC §5.2).
	rej := wire.AppendRejection(nil, []byte("0010hello"), generated.RspBadFrame, answeredAt)
	a, err = channel.Decode(rej)
	assert.NilError(t, err)
	assert.Equal(t, a.Code, generated.RspBadFrame)
	assert.Equal(t, a.Header.TxCode, "hello")
	assert.Equal(t, a.Header.GUID, "")

	rej = wire.AppendRejection(nil, []byte("0143BKZZ0001NOT-A-GUID"), generated.RspUnknownTx, answeredAt)
	a, err = channel.Decode(rej)
	assert.NilError(t, err)
	assert.Equal(t, a.Code, generated.RspUnknownTx)
	assert.Equal(t, a.Header.GUID, "NOT-A-GUID")
}

func TestDecodeMalformed(t *testing.T) {
	h := reqHeader(t)
	ok, err := wire.AppendResponse(nil, &h, generated.RspHTTP500, nil, answeredAt)
	assert.NilError(t, err)
	okStr := string(ok)
	withBody := func(code, body string) string {
		s := okStr[:51] + code + okStr[55:] + body
		return fmt.Sprintf("%04d", len(s)-4) + s[4:]
	}
	cases := []struct{ name, frame, want string }{
		{"short", okStr[:40], "shorter than the 80-byte header"},
		{"bad prefix", "00x6" + okStr[4:], "not 4 ASCII digits"},
		{"prefix mismatch", "0077" + okStr[4:], "length prefix says 77 bytes, 76 follow"},
		{"request flag", okStr[:44] + "S" + okStr[45:], `FLAG "S"`},
		{"unknown code", okStr[:51] + "Z999" + okStr[55:], `RSP_CODE "Z999" is not a response code`},
		{"body on error", withBody("E500", "xyz"), "a E500 answer carries a 3-byte body"},
		{"0000 without body", withBody("0000", ""), "body is 0 bytes, layout needs 45"},
		{"bad sent_at", okStr[:55] + "20261399103001" + okStr[69:], "SENT_AT"},
		{"blank guid not rejection", okStr[:12] + strings.Repeat(" ", 32) + okStr[44:], "GUID"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := channel.Decode([]byte(tc.frame))
			assert.ErrorContains(t, err, tc.want)
			assert.Assert(t, errors.Is(err, channel.ErrMalformed))
		})
	}
}

// squeeze collapses each line's runs of spaces, to compare tables without
// depending on column widths.
func squeeze(s string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}

func TestQuote(t *testing.T) {
	assert.Equal(t, channel.Quote([]byte("0076abc")), `"0076abc"`)
	assert.Equal(t, channel.Quote([]byte{'a', 0, 0xff}), `"a\x00\xff" (hex 6100ff)`)
}
