package generated_test

import (
	"bytes"
	"testing"

	"lhrelay/internal/generated"
)

// FuzzHeader: no input panics the header decoder, and whatever decodes
// encodes back to the same bytes (filler aside) and decodes the same again.
func FuzzHeader(f *testing.F) {
	f.Add([]byte(reqHeader))
	f.Add([]byte(with(reqHeader, 44, "R")))
	f.Add([]byte("0076" + "        " + guid + "S" + "      " + "    " + "20240229235959" + "           "))
	f.Fuzz(func(t *testing.T, data []byte) {
		var h generated.Header
		if h.Decode(string(data)) != nil {
			raw := generated.RawHeader(data)
			if out := raw.AppendRawTo(nil); len(out) != generated.HeaderLen {
				t.Fatalf("raw echo is %d bytes", len(out))
			}
			return
		}
		out, err := h.AppendTo(nil)
		if err != nil {
			t.Fatalf("decoded header does not encode: %v", err)
		}
		var again generated.Header
		if err := again.Decode(string(out)); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if again != h {
			t.Fatalf("decode → encode → decode changed the header: %+v → %+v", h, again)
		}
	})
}

// FuzzBodies: for every registered transaction, no input panics the body
// decoders, and decode → encode → decode is stable.
func FuzzBodies(f *testing.F) {
	f.Add("BKTR0001", true, []byte(bktrBody))
	f.Add("BKTR0001", false, []byte(bktrAnswer))
	f.Add("BKIQ0001", true, []byte(bkiqBody))
	f.Add("BKIQ0001", false, []byte(bkiqAnswer))
	f.Fuzz(func(t *testing.T, code string, request bool, data []byte) {
		tx, ok := generated.LookupTransaction(code)
		if !ok {
			return
		}
		type body interface {
			Decode(string) error
			AppendTo([]byte) ([]byte, error)
		}
		var first, second body = tx.NewResponse(), tx.NewResponse()
		if request {
			first, second = tx.NewRequest(), tx.NewRequest()
		}
		if first.Decode(string(data)) != nil {
			return
		}
		out, err := first.AppendTo(nil)
		if err != nil {
			t.Fatalf("decoded body does not encode: %v", err)
		}
		if err := second.Decode(string(out)); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		again, _ := second.AppendTo(nil)
		if !bytes.Equal(out, again) {
			t.Fatalf("unstable: %q → %q", out, again)
		}
	})
}

// FuzzLengthPrefix: the prefix parser accepts exactly 4 ASCII digits.
func FuzzLengthPrefix(f *testing.F) {
	for _, s := range []string{"0143", "+143", " 143", "9999", "00", "abcd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := generated.ParseLengthPrefix(s)
		digits := len(s) == 4
		for i := 0; i < len(s); i++ {
			digits = digits && s[i] >= '0' && s[i] <= '9'
		}
		if digits != (err == nil) {
			t.Fatalf("%q: accepted=%v, want %v", s, err == nil, digits)
		}
		if err == nil && (n < 0 || n > generated.MaxFrameLen) {
			t.Fatalf("%q: %d out of range", s, n)
		}
	})
}
