package wire

import (
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/generated"
)

func TestDecodeRequest(t *testing.T) {
	h := generated.Header{TxCode: "BKTR0001", GUID: "0123456789abcdef0123456789abcdef", Flag: generated.FlagRequest, SrcOrg: "081", DstOrg: "999", SentAt: "20261129103000"}
	req := &generated.BKTR0001Request{WdBank: "081", WdAcct: "11002003004005", DpBank: "004", DpAcct: "1", Amount: 5, Memo: "m"}
	frame, err := generated.AppendFrame(nil, &h, req)
	assert.NilError(t, err)

	tx, got, body, err := DecodeRequest(frame)
	assert.NilError(t, err)
	assert.Equal(t, tx.Code, "BKTR0001")
	assert.Equal(t, got.GUID, h.GUID)
	assert.DeepEqual(t, body, generated.RequestBody(&generated.BKTR0001Request{WdBank: "081", WdAcct: "11002003004005", DpBank: "004", DpAcct: "00000000000001", Amount: 5, Memo: "m"}))

	_, _, _, err = DecodeRequest(frame[:40])
	assert.ErrorContains(t, err, "shorter than")
	_, _, _, err = DecodeRequest(frame[:len(frame)-1])
	assert.ErrorContains(t, err, "length prefix says")
	unknown := append([]byte(nil), frame...)
	copy(unknown[4:12], "BKZZ9999")
	_, _, _, err = DecodeRequest(unknown)
	assert.ErrorContains(t, err, "not registered")
}
