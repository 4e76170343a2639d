package channel

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"lhrelay/internal/fixedwidth"
	"lhrelay/internal/generated"
)

// A request's defaults are the layouts': the transaction sent when none is
// named (generated.ClientDefault), the body fields' (FieldSpec.Default) and
// the header's institutions (generated.DefaultSrcOrg, generated.DefaultDstOrg).

// guidWidth is the width of the header's GUID field.
const guidWidth = generated.HeaderGUIDWidth

// NewGUID returns a fresh random GUID: as many lowercase hex digits as the
// header's GUID field holds (128 random bits for a 32-digit field).
func NewGUID() string {
	b := make([]byte, (guidWidth+1)/2)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it crashes the program instead)
	return hex.EncodeToString(b)[:guidWidth]
}

// ValidGUID reports whether s fills the header's GUID field with lowercase
// hex digits, as SPEC §1 requires.
func ValidGUID(s string) bool {
	return len(s) == guidWidth && fixedwidth.LowerHex(s)
}

// Request is one request frame to build. Fields holds the body's values in
// text form keyed by the layout's JSON keys (generated.FieldSpec.JSON);
// numeric fields are decimal integers, code fields either the code map's
// wire code or the core's id. Every field of the layout must be present: use
// WithDefaults to fill the ones a caller does not care about.
type Request struct {
	Tx     string // TX_CODE of a registered transaction; generated.ClientDefault when empty
	GUID   string // 32 lowercase hex digits; required
	SrcOrg string // generated.DefaultSrcOrg when empty
	DstOrg string // generated.DefaultDstOrg when empty
	Fields map[string]string
}

// BuildRequest builds a whole request frame (length prefix, header, body) of
// transaction tx with the default institutions and SENT_AT from now.
func BuildRequest(tx, guid string, fields map[string]string, now time.Time) ([]byte, error) {
	return Request{Tx: tx, GUID: guid, Fields: fields}.Frame(now)
}

// Frame builds the request frame with SENT_AT from now.
func (r Request) Frame(now time.Time) ([]byte, error) {
	return r.AppendFrame(nil, now)
}

// AppendFrame appends the request frame to dst. On error dst is returned
// unchanged.
func (r Request) AppendFrame(dst []byte, now time.Time) ([]byte, error) {
	tx, err := LookupTx(r.Tx)
	if err != nil {
		return dst, err
	}
	if !ValidGUID(r.GUID) {
		return dst, fmt.Errorf("guid %q: want %d lowercase hex digits", r.GUID, guidWidth)
	}
	body, err := newRequestBody(tx, r.Fields)
	if err != nil {
		return dst, err
	}
	h := generated.Header{
		TxCode: tx.Code,
		GUID:   r.GUID,
		Flag:   generated.FlagRequest,
		SrcOrg: orDefault(r.SrcOrg, generated.DefaultSrcOrg),
		DstOrg: orDefault(r.DstOrg, generated.DefaultDstOrg),
		SentAt: fixedwidth.FormatTimestamp(now),
	}
	out, err := generated.AppendFrame(dst, &h, body)
	if err != nil {
		return dst, fmt.Errorf("%s request: %w", tx.Code, withJSONKey(err, body.Fields()))
	}
	return out, nil
}

// newRequestBody sets every field of tx's request body from fields, refusing
// a key the layout does not have and a field left without a value.
func newRequestBody(tx *generated.Transaction, fields map[string]string) (generated.RequestBody, error) {
	body := tx.NewRequest()
	known := RequestKeys(tx)
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		if !slices.Contains(known, key) {
			return nil, fmt.Errorf("%s has no request field with JSON key %q (fields: %s)", tx.Code, key, strings.Join(known, ", "))
		}
		if err := body.Set(key, fields[key]); err != nil {
			return nil, err
		}
	}
	var missing []string
	for _, key := range known {
		if _, ok := fields[key]; !ok {
			missing = append(missing, key)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s request: no value for %s", tx.Code, strings.Join(missing, ", "))
	}
	return body, nil
}

// withJSONKey prefixes a field error with the field's JSON key, the name a
// caller typed (as a JSON key or, kebab-cased, as an lhsend flag).
func withJSONKey(err error, fields []generated.FieldValue) error {
	var fe *fixedwidth.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	for _, f := range fields {
		if f.Name == fe.Field {
			return fmt.Errorf("%s: %w", f.JSON, err)
		}
	}
	return err
}

// orDefault returns v, or def when v is empty.
func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// LookupTx returns the registered transaction code (the layouts' client
// default when code is empty), or an error that lists the registered ones.
func LookupTx(code string) (*generated.Transaction, error) {
	if code == "" {
		return generated.ClientDefault(), nil
	}
	tx, ok := generated.LookupTransaction(code)
	if !ok {
		return nil, fmt.Errorf("unknown transaction %q (registered: %s)", code, strings.Join(TxCodes(), ", "))
	}
	return tx, nil
}

// TxCodes lists the registered transaction codes.
func TxCodes() []string {
	var codes []string
	for _, tx := range generated.Transactions() {
		codes = append(codes, tx.Code)
	}
	return codes
}

// UnregisteredTxCode is a TX_CODE as wide as the registered ones that no
// layout registers (Z's, or the first letter down from Z that is free),
// for a frame the relay must refuse as an unknown transaction.
func UnregisteredTxCode() string {
	width := len(generated.ClientDefault().Code)
	for c := 'Z'; ; c-- {
		code := strings.Repeat(string(c), width)
		if _, ok := generated.LookupTransaction(code); !ok {
			return code
		}
	}
}

// FirstSettledBy is the first registered transaction whose unknown outcome
// is settled the way s says: generated.SettleByLookup for one that posts
// (a transfer), SettleAsNotPosted for a read. Nil when none is.
func FirstSettledBy(s generated.Settlement) *generated.Transaction {
	for _, tx := range generated.Transactions() {
		if tx.Settle == s {
			return tx
		}
	}
	return nil
}

// RequestKeys lists the JSON keys of tx's request body in layout order.
func RequestKeys(tx *generated.Transaction) []string {
	var keys []string
	for _, f := range tx.RequestFields {
		keys = append(keys, f.JSON)
	}
	return keys
}

// AllRequestKeys is the union of every registered transaction's request
// JSON keys, in registry then layout order, each once.
func AllRequestKeys() []string {
	var keys []string
	for _, tx := range generated.Transactions() {
		for _, k := range RequestKeys(tx) {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// WithDefaults returns a copy of fields completed with the layout's default
// for every request key of tx that fields lacks.
func WithDefaults(tx *generated.Transaction, fields map[string]string) map[string]string {
	out := maps.Clone(fields)
	if out == nil {
		out = make(map[string]string)
	}
	for _, f := range tx.RequestFields {
		if _, ok := out[f.JSON]; !ok && f.HasDefault {
			out[f.JSON] = f.Default
		}
	}
	return out
}

// KebabFlag turns a JSON key into a command-line flag name: wdBank →
// wd-bank. A run of capitals is one word: coreTXID → core-txid.
func KebabFlag(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 'A' && c <= 'Z' {
			prevLower := i > 0 && !isUpper(key[i-1])
			nextLower := i > 0 && i+1 < len(key) && isUpper(key[i-1]) && isLowerLetter(key[i+1])
			if prevLower || nextLower {
				b.WriteByte('-')
			}
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}

// CamelKey turns a flag name into a JSON key: wd-bank → wdBank.
func CamelKey(flag string) string {
	var b strings.Builder
	up := false
	for i := 0; i < len(flag); i++ {
		c := flag[i]
		if c == '-' {
			up = b.Len() > 0
			continue
		}
		if up && isLowerLetter(c) {
			c -= 'a' - 'A'
		}
		up = false
		b.WriteByte(c)
	}
	return b.String()
}

func isUpper(c byte) bool       { return c >= 'A' && c <= 'Z' }
func isLowerLetter(c byte) bool { return c >= 'a' && c <= 'z' }
