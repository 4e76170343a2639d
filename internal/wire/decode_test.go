package wire

import (
	"errors"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
)

func TestParseRequest(t *testing.T) {
	h := generated.Header{TxCode: "BKTR0001", GUID: "0123456789abcdef0123456789abcdef", Flag: generated.FlagRequest, SrcOrg: "081", DstOrg: "999", SentAt: "20261129103000"}
	req := &generated.BKTR0001Request{WdBank: "081", WdAcct: "11002003004005", DpBank: "004", DpAcct: "1", Amount: 5, Memo: "m"}
	frame, err := generated.AppendFrame(nil, &h, req)
	assert.NilError(t, err)

	r, err := ParseRequest(frame)
	assert.NilError(t, err)
	assert.Equal(t, r.Tx.Code, "BKTR0001")
	assert.Equal(t, r.Header.GUID, h.GUID)
	assert.DeepEqual(t, r.Body, generated.RequestBody(&generated.BKTR0001Request{WdBank: "081", WdAcct: "11002003004005", DpBank: "004", DpAcct: "00000000000001", Amount: 5, Memo: "m"}))

	unknown := append([]byte(nil), frame...)
	copy(unknown[4:12], "BKZZ9999")
	response := append([]byte(nil), frame...)
	response[44] = 'R'
	badBody := append([]byte(nil), frame...)
	badBody[generated.HeaderLen+3] = 'x'
	for _, tc := range []struct {
		name  string
		frame []byte
		src   generated.Source
		want  string
		named bool // the header decoded, so the refusal still names the request
		found bool // the transaction was found
	}{
		{"short", frame[:40], generated.SourceBadFrame, "shorter than", false, false},
		{"prefix", frame[:len(frame)-1], generated.SourceBadFrame, "length prefix says", true, false},
		{"unprintable", append(append([]byte(nil), frame[:len(frame)-1]...), 0x01), generated.SourceBadFrame, "printable", false, false},
		{"response flag", response, generated.SourceBadFrame, "FLAG is not a request", true, false},
		{"unknown", unknown, generated.SourceUnknownTx, "not registered", true, false},
		{"bad body", badBody, generated.SourceBadFrame, "WD_ACCT", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseRequest(tc.frame)
			var re *RefusedError
			assert.Assert(t, errors.As(err, &re), "%v", err)
			assert.Equal(t, re.Source, tc.src)
			assert.ErrorContains(t, err, tc.want)
			assert.Equal(t, r.Header.GUID != "", tc.named)
			assert.Equal(t, r.Tx != nil, tc.found)
			assert.Assert(t, r.Body == nil)
		})
	}
}
