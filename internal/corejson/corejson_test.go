package corejson

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

// oracle is what the generated codecs used to decode into with
// encoding/json: pointers tell a missing key (or null) from a zero value.
type oracle struct {
	GUID   *string `json:"guid"`
	TxID   *string `json:"txId"`
	Amount *int64  `json:"amount"`
	Memo   *string `json:"memo"`
}

var oracleKeys = []string{"guid", "txId", "amount", "memo"}

// decoded is one decoding's result, comparable between the two decoders.
type decoded struct {
	present [4]bool
	strs    [4]string
	amount  int64
}

func viaDecoder(data []byte) (decoded, error) {
	var out decoded
	d := NewDecoder(data)
	for d.Next() {
		switch i := d.Match(oracleKeys); i {
		case 2:
			out.amount, out.present[i] = d.Int()
		case 0, 1, 3:
			out.strs[i], out.present[i] = d.String()
		default:
			d.Skip()
		}
	}
	return out, d.Err()
}

func viaEncodingJSON(data []byte) (decoded, error) {
	var j oracle
	var out decoded
	if err := json.Unmarshal(data, &j); err != nil {
		return out, err
	}
	for i, p := range []*string{j.GUID, j.TxID, nil, j.Memo} {
		if p != nil {
			out.present[i], out.strs[i] = true, *p
		}
	}
	if j.Amount != nil {
		out.present[2], out.amount = true, *j.Amount
	}
	return out, nil
}

// agree fails unless the Decoder reads data as json.Unmarshal does: the
// same values, or an error of the same kind (for a syntax error, the same
// words).
func agree(t *testing.T, data []byte) {
	t.Helper()
	got, err := viaDecoder(data)
	want, jerr := viaEncodingJSON(data)
	if jerr != nil {
		assert.Assert(t, err != nil, "%q: encoding/json: %v; decoder: %+v", data, jerr, got)
		var js *json.SyntaxError
		var se *SyntaxError
		assert.Equal(t, errors.As(jerr, &js), errors.As(err, &se), "%q: encoding/json: %v; decoder: %v", data, jerr, err)
		if js != nil {
			assert.Equal(t, se.msg, js.Error(), "%q", data)
		}
		return
	}
	assert.NilError(t, err, "%q", data)
	assert.Equal(t, got, want, "%q", data)
}

// bodies are inputs for both decoders: the answers a core gives, and every
// corner of the syntax and of encoding/json's rules for a struct.
var bodies = []string{
	`{"guid":"0123456789abcdef0123456789abcdef","txId":"T1","amount":5,"memo":"rent"}`,
	` { "txId" : "T1" , "guid" : "abc" } `,
	"\t{\n\"amount\"\r:\n-12}\n",
	`{}`, ` { } `, `null`, ` null `, `[]`, `"guid"`, `5`, `true`, `{"a":1} {}`, `{"guid":"abc"`, `{"guid":"abc"} trailing`, ``, ` `,
	// Keys: case folding, escapes, the Kelvin sign and the long s.
	`{"GUID":"abc"}`, `{"Guid":"abc","guid":"def"}`, `{"guid":"def","Guid":"abc"}`, `{"TXID":"x"}`,
	`{"gu\u0069d":"abc"}`, `{"tx\u0049d":"x"}`, "{\"txI\u212a\":\"x\"}", "{\"me\u212Ao\":\"x\"}", "{\"\u017fmemo\":\"x\"}",
	`{"txId\u0000":"x"}`, `{"":"x"}`, `{"guid ":"x"}`,
	// Repeated keys and null.
	`{"guid":"abc","guid":null}`, `{"guid":null,"guid":"abc"}`, `{"guid":null}`, `{"amount":null}`, `{"amount":1,"amount":2}`,
	// Strings: escapes, \u sequences, surrogates, non-ASCII, invalid UTF-8.
	`{"memo":"a\"b\\c\/d\b\f\n\r\t"}`, `{"memo":"a\u0062c\u00e9\u2028"}`, `{"memo":"\ud83d\ude00"}`, `{"memo":"\ud83d"}`,
	`{"memo":"\ud83dx"}`, `{"memo":"\ud83d\u0041"}`, `{"memo":"\ude00\ud83d"}`, `{"memo":"\uDBFF\uDFFF"}`, `{"memo":"ünï"}`,
	"{\"memo\":\"\xff\xfe\"}", "{\"memo\":\"\xed\xa0\x80\"}", "{\"memo\":\"a\x01b\"}", "{\"memo\":\"a\x7fb\"}",
	`{"memo":"\x"}`, `{"memo":"\u12"}`, `{"memo":"\u12G4"}`, `{"memo":"abc`, `{"memo":"\`,
	// Numbers.
	`{"amount":0}`, `{"amount":-0}`, `{"amount":9223372036854775807}`, `{"amount":-9223372036854775808}`,
	`{"amount":9223372036854775808}`, `{"amount":-9223372036854775809}`, `{"amount":99999999999999999999}`,
	`{"amount":1.5}`, `{"amount":1.0}`, `{"amount":1e3}`, `{"amount":1E+3}`, `{"amount":-1e-3}`, `{"amount":01}`,
	`{"amount":-}`, `{"amount":1.}`, `{"amount":1e}`, `{"amount":.5}`, `{"amount":+1}`, `{"amount":0x10}`, `{"amount":1`,
	// Types.
	`{"amount":"5"}`, `{"amount":true}`, `{"amount":{}}`, `{"amount":[1]}`, `{"guid":5}`, `{"guid":false}`,
	`{"guid":{"a":1}}`, `{"guid":[]}`, `{"guid":5,"memo":"x"}`, `{"guid":5,"memo":x}`, `{"guid":5} x`,
	// Unknown keys, nested values, literals.
	`{"nested":{"guid":"inner","x":[1,{"guid":"deep"}]},"guid":"outer"}`, `{"s":"a,}\"]","guid":"after"}`,
	`{"t":true,"f":false,"n":null,"num":-1.5e3,"guid":"x"}`, `{"a":[],"b":{},"c":[[]],"d":[{}],"guid":"x"}`,
	`{"a":[1,2,]}`, `{"a":[1 2]}`, `{"a":{"b"}}`, `{"a":{"b":1,}}`, `{"a":{1:2}}`, `{"a":tru}`, `{"a":nul}`, `{"a":fals}`,
	`{"a":[}`, `{"a":{]}`, `{"a":1,}`, `{,}`, `{"a" 1}`, `{"a":1 "b":2}`, `{"a":}`, `{"a"`, `{"a":`, `{`, `}`, `[`, `{"a":[1,`,
	`{"a":truex}`, `nullx`, `nul`, `{"a":"b"}}`, `{"a":"b"}]`, `[1,2]`, `{"a":1}` + "\x00",
}

func TestDecoderAgreesWithEncodingJSON(t *testing.T) {
	for _, body := range bodies {
		agree(t, []byte(body))
	}
	deep := strings.Repeat("[", maxDepth-1) + strings.Repeat("]", maxDepth-1)
	agree(t, []byte(`{"a":`+deep+`,"guid":"x"}`))
	agree(t, []byte(`{"a":[`+deep+`],"guid":"x"}`))
	deep = strings.Repeat(`{"a":`, maxDepth-1) + "1" + strings.Repeat("}", maxDepth-1)
	agree(t, []byte(`{"a":`+deep+`}`))
	agree(t, []byte(`{"b":{"a":`+deep+`}}`))
}

func TestDecoderValues(t *testing.T) {
	got, err := viaDecoder([]byte(`{"guid":"g","TXID":"t\u00e9","amount":-42,"memo":null,"x":{"memo":"no"}}`))
	assert.NilError(t, err)
	assert.Equal(t, got, decoded{present: [4]bool{true, true, true, false}, strs: [4]string{"g", "té", "", ""}, amount: -42})

	_, err = viaDecoder([]byte(`{"amount":1.5}`))
	var te *TypeError
	assert.Assert(t, errors.As(err, &te))
	assert.Equal(t, err.Error(), `key "amount": cannot read number 1.5 as int64`)
	_, err = viaDecoder([]byte(`[1]`))
	assert.Equal(t, err.Error(), `cannot read array as an object`)
	_, err = viaDecoder([]byte(`{"amount":1,}`))
	assert.Equal(t, err.Error(), `invalid character '}' looking for beginning of object key string (offset 12)`)
	_, err = viaDecoder([]byte(`{"amount":"1"`))
	assert.Equal(t, err.Error(), `unexpected end of JSON input (offset 13)`)
	// A syntax error after a value of the wrong type is the error.
	_, err = viaDecoder([]byte(`{"amount":"1",}`))
	var se *SyntaxError
	assert.Assert(t, errors.As(err, &se), "%v", err)
}

// TestDecoderAllocations: reading a core's answer costs one string
// conversion for all its plain string values, and nothing for integers,
// skipped members or matched keys.
func TestDecoderAllocations(t *testing.T) {
	data := []byte(`{"guid":"0123456789abcdef0123456789abcdef","txId":"T1","amount":5,"memo":"rent","x":[{"y":null}]}`)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := viaDecoder(data); err != nil {
			t.Fatal(err)
		}
	})
	assert.Equal(t, allocs, 1.0)
	allocs = testing.AllocsPerRun(100, func() {
		d := NewDecoder(data)
		var buf [64]byte
		for d.Next() {
			if d.Match(oracleKeys) == 0 {
				if id, ok := d.AppendString(buf[:0]); !ok || len(id) != 32 {
					t.Fatal("guid")
				}
				continue
			}
			d.Skip()
		}
	})
	assert.Equal(t, allocs, 0.0)
}

func FuzzDecoder(f *testing.F) {
	for _, body := range bodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, data []byte) { agree(t, data) })
}

var strs = []string{
	"", "rent", "lhsend", `a"b\c`, "<script>&</script>", "\x00\x01\b\f\n\r\t\x1f\x7f", "ünï", "\u2028\u2029",
	"\xff", "a\xed\xa0\x80b", "\U0001F600", "\uFFFD",
}

func TestAppendStringMatchesMarshal(t *testing.T) {
	for _, s := range strs {
		want, err := json.Marshal(s)
		assert.NilError(t, err)
		assert.Equal(t, string(AppendString(nil, s)), string(want), "%q", s)
	}
	assert.Equal(t, string(AppendInt(AppendKey([]byte("{"), "amount"), -5)), `{"amount":-5`)
}

func FuzzAppendString(f *testing.F) {
	for _, s := range strs {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		assert.NilError(t, err)
		got := AppendString([]byte("x"), s)
		assert.Equal(t, string(got[1:]), string(want), "%q", s)
		// What is written reads back as encoding/json reads it.
		var back string
		assert.NilError(t, json.Unmarshal(got[1:], &back))
		d := NewDecoder(append(append([]byte(`{"memo":`), got[1:]...), '}'))
		assert.Assert(t, d.Next())
		v, ok := d.String()
		assert.Assert(t, ok)
		assert.Equal(t, v, back)
	})
}

func BenchmarkDecode(b *testing.B) {
	data := []byte(`{"guid":"0123456789abcdef0123456789abcdef","txId":"T000000000000001","balance":950000,"postedAt":"20261129103001"}`)
	keys := []string{"txId", "balance", "postedAt"}
	b.Run("corejson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d := NewDecoder(data)
			for d.Next() {
				switch d.Match(keys) {
				case 0, 2:
					d.String()
				case 1:
					d.Int()
				default:
					d.Skip()
				}
			}
			if d.Err() != nil {
				b.Fatal(d.Err())
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var j struct {
				TxID     *string `json:"txId"`
				Balance  *int64  `json:"balance"`
				PostedAt *string `json:"postedAt"`
			}
			if err := json.Unmarshal(data, &j); err != nil {
				b.Fatal(err)
			}
		}
	})
}
