package testkit

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"lhrelay/internal/channel"
	"lhrelay/internal/fixedwidth"
	"lhrelay/internal/generated"
)

var (
	guidSeq   atomic.Uint64
	guidEpoch = uint64(time.Now().UnixNano())
)

// GUID returns a fresh GUID: unique within the test binary and, by the
// binary's start time in its first half, across binaries sharing a
// ledger. GUIDs made later sort after earlier ones.
func GUID() string { return fmt.Sprintf("%016x%016x", guidEpoch, guidSeq.Add(1)) }

// TransferTx is the transfer the tests send: their fields are its
// layout's. It is found in the registry by its generated request type, so
// that a layout renamed or removed breaks the build rather than quietly
// giving the tests another transaction (layouts are added, and sort
// before it, in gen's extension test).
func TransferTx() *generated.Transaction { return registered(new(generated.BKTR0001Request)) }

// ReadTx is the inquiry the tests send, found as TransferTx is: a read,
// settled as never posted (lookup none).
func ReadTx() *generated.Transaction { return registered(new(generated.BKIQ0001Request)) }

func registered(body generated.RequestBody) *generated.Transaction {
	tx, ok := generated.LookupTransaction(body.TxCode())
	if !ok {
		panic(fmt.Sprintf("testkit: %s is not in the registry: regenerate", body.TxCode()))
	}
	return tx
}

// SentAt is the SENT_AT of Frame's frames: fixed, so that a request built
// twice is the same bytes.
var SentAt = time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC)

// Frame builds a request frame of tx for guid as a channel does
// (channel.Request): each field by JSON key from fields, else the
// layout's client default.
func Frame(t testing.TB, tx *generated.Transaction, guid string, fields map[string]string) []byte {
	t.Helper()
	return FrameAt(t, tx, guid, fields, SentAt)
}

// FrameAt is Frame with its own SENT_AT.
func FrameAt(t testing.TB, tx *generated.Transaction, guid string, fields map[string]string, at time.Time) []byte {
	t.Helper()
	f, err := channel.Request{Tx: tx.Code, GUID: guid, Fields: channel.WithDefaults(tx, fields)}.Frame(at)
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	return f
}

// Transfer is Frame of TransferTx.
func Transfer(t testing.TB, guid string, fields map[string]string) []byte {
	t.Helper()
	return Frame(t, TransferTx(), guid, fields)
}

// Body is the body of tx's request with fields over the layout's client
// defaults, for tests that build frames around bodies (RawFrame). Its
// arguments are the test's own constants: a body that does not encode is
// a bug in the test, and panics.
func Body(tx *generated.Transaction, fields map[string]string) string {
	f, err := channel.Request{Tx: tx.Code, GUID: GUID(), Fields: channel.WithDefaults(tx, fields)}.Frame(SentAt)
	if err != nil {
		panic(fmt.Sprintf("testkit: %v", err))
	}
	return string(f[generated.HeaderLen:])
}

// RawFrame is a request frame of TX_CODE txCode holding body as given,
// whatever its layout says: for what is done with bytes as received. A
// header that does not encode (a bad GUID or SENT_AT of the test's own)
// panics.
func RawFrame(txCode, guid string, at time.Time, body string) []byte {
	h := generated.Header{TxCode: txCode, GUID: guid, Flag: generated.FlagRequest, SrcOrg: generated.DefaultSrcOrg, DstOrg: generated.DefaultDstOrg, SentAt: fixedwidth.FormatTimestamp(at)}
	h.Len = generated.HeaderLen - generated.PrefixLen + len(body)
	f, err := h.AppendTo(nil)
	if err != nil {
		panic(fmt.Sprintf("testkit: %v", err))
	}
	return append(f, body...)
}
