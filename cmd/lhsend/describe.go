package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"lhrelay/internal/channel"
	"lhrelay/internal/fixedwidth"
	"lhrelay/internal/generated"
)

// describe prints every registered transaction as its layout declares it:
// the core call, how an unknown outcome is settled, and each request
// field's place in the frame, so that a frame can be read or built by hand.
func describe(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, tx := range generated.Transactions() {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		body := ""
		if tx.JSONBody {
			body = " with the request as JSON"
		}
		lookup := "none: an unknown outcome is settled as never posted, without asking the core"
		if tx.Settle == generated.SettleByLookup {
			lookup = "GET " + tx.LookupPath
		}
		fmt.Fprintf(tw, "%s\t%s\n", tx.Code, tx.Title)
		fmt.Fprintf(tw, "  core call\t%s %s%s\n", tx.Method, tx.Path, body)
		fmt.Fprintf(tw, "  lookup\t%s\n", lookup)
		fmt.Fprintf(tw, "  frame\t%d-byte header + %d-byte request body; answer body %d bytes\n", generated.HeaderLen, tx.RequestLen, tx.ResponseLen)
		fmt.Fprintln(tw, "  FIELD\tJSON\tOFFSET\tLEN\tKIND\tDEFAULT")
		for _, f := range tx.RequestFields {
			def := "-"
			if f.HasDefault {
				def = fmt.Sprintf("%q", f.Default)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\t%s\n", f.Name, f.JSON, generated.HeaderLen+f.Offset, f.Len, f.Kind, def)
		}
	}
	fmt.Fprintln(tw, "\nOFFSET counts from the frame's first byte, the length prefix included.")
	return tw.Flush()
}

// spoil turns a valid request frame into one the relay must refuse with
// code: for the unknown-transaction code, the same frame under a TX_CODE
// no layout registers; for the bad-frame code, the frame one body byte
// short (its length prefix saying so, so that the frame arrives whole).
func spoil(frame []byte, code generated.RspCode) ([]byte, error) {
	h := generated.RawHeader(frame)
	body := frame[generated.HeaderLen:]
	switch code {
	case generated.RspUnknownTx:
		h.TxCode = channel.UnregisteredTxCode()
	case generated.RspBadFrame:
		body = body[:len(body)-1]
	default:
		return nil, fmt.Errorf("--bad %s: want %s (unknown transaction) or %s (malformed frame)", code, generated.RspUnknownTx, generated.RspBadFrame)
	}
	out := h.AppendRawTo(nil)
	out = append(out, body...)
	fixedwidth.AppendNumber(out[:0], int64(len(out)-generated.PrefixLen), generated.PrefixLen)
	return out, nil
}
