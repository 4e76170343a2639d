package conformance

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"lhrelay/internal/fixedwidth"
	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
)

// What a case is about.
type kind int

const (
	// answered: one frame, one core call; the core's answer decides.
	answered kind = iota + 1
	// rejected: a frame answered without a claim or a core call (E101,
	// E102), from the raw bytes at the header positions.
	rejected
	// inFlight: the same GUID again while its call is at the core (E903).
	inFlight
	// reused: the GUID of a posted request with another request (E904).
	reused
)

// What the core's lookup says of an UNKNOWN row, and when.
type lookupSays int

const (
	// notAsked: the transaction is settled without a lookup (lookup
	// none), or the row is not UNKNOWN.
	notAsked lookupSays = iota
	// postedFirst: the core posted the call it got.
	postedFirst
	// neverPosted: it did not.
	neverPosted
	// postedLate: it posted it after resolve had looked it up, which
	// settled the row as never posted (a lookup that came too early).
	postedLate
)

func (l lookupSays) String() string {
	return [...]string{"", "posted", "never_posted", "posted_late"}[l]
}

// A tcase is one line of the conformance table.
type tcase struct {
	name string
	tx   *generated.Transaction
	kind kind
	want generated.RspCode // the code the channel is answered

	// answered, inFlight, reused: the core's answer to the relay's call.
	answer answer
	// refused: the relay's --core refuses connections.
	refused bool
	// timeout is the relay's --timeout.
	timeout time.Duration
	lookup  lookupSays

	// The frame the channel sends, for guid; nil: the channel's default
	// request of tx (every field the layout's default).
	frame func(t *testing.T, guid string) []byte
	// closes: the relay answers and closes the connection (framing lost).
	closes bool
	// reused: the other request sent with the GUID once the first is
	// posted.
	second func(t *testing.T, guid string) []byte
}

// The relay's --timeout: long enough that no call under -race on a busy
// machine reaches it, except where a case makes the core never answer.
const (
	relayTimeout    = 5 * time.Second
	neverAnsweredIn = 300 * time.Millisecond
)

// table builds the cases from the registry: for every transaction, each
// response code of SPEC §4 that can apply to it, reached the ways §5 and §6
// name.
func table(t *testing.T) []tcase {
	var cases []tcase
	txs := generated.Transactions()
	for i, tx := range txs {
		cases = append(cases, answeredCases(tx)...)
		cases = append(cases, rejectedCases(t, tx)...)
		cases = append(cases, tcase{name: "in_flight", tx: tx, kind: inFlight, want: generated.RspInProgress,
			answer: answer{posts: true, hold: untilReleased, status: http.StatusOK, body: okJSON}})
		cases = append(cases, tcase{name: "other_body", tx: tx, kind: reused, want: generated.RspGUIDReused, answer: posting,
			second: func(t *testing.T, guid string) []byte { return otherBody(t, tx, defaultFrame(t, tx, guid)) }})
		if len(txs) > 1 {
			other := txs[(i+1)%len(txs)]
			cases = append(cases, tcase{name: "other_tx_" + other.Code, tx: tx, kind: reused, want: generated.RspGUIDReused, answer: posting,
				second: func(t *testing.T, guid string) []byte { return defaultFrame(t, other, guid) }})
		}
	}
	for i := range cases {
		c := &cases[i]
		c.name = c.tx.Code + "/" + string(c.want) + "/" + c.name
		if c.lookup != notAsked {
			c.name += "/lookup_" + c.lookup.String()
		}
		if c.timeout == 0 {
			c.timeout = relayTimeout
		}
	}
	return cases
}

// answeredCases are tx's cases decided by what the core answers (or by a
// core that cannot be reached).
func answeredCases(tx *generated.Transaction) []tcase {
	var cases []tcase
	// add adds c, once for each thing the lookup may say when c's answer
	// is an unknown outcome.
	add := func(c tcase, says ...lookupSays) {
		if c.want == generated.RspReadTimeout {
			cases = append(cases, unknownCases(tx, c, says...)...)
		} else {
			cases = append(cases, c)
		}
	}
	add(tcase{name: "200", answer: posting, want: generated.RspHTTP200})

	// 422 with each result the response codes know, and with another.
	for _, src := range generated.Sources() {
		if r, ok := generated.SourceForResult(string(src)); ok && r == src {
			add(tcase{name: "422_" + string(src), want: statusCode(tx, http.StatusUnprocessableEntity, src.Code()),
				answer: answer{status: http.StatusUnprocessableEntity, body: result(string(src))}}, postedFirst, neverPosted)
		}
	}
	add(tcase{name: "422_other_result", want: statusCode(tx, http.StatusUnprocessableEntity, generated.RspHTTP500),
		answer: answer{status: http.StatusUnprocessableEntity, body: result("NOT_A_RESULT_ANYONE_KNOWS")}}, postedFirst, neverPosted)

	// Every other status: the layout's mapping, else SPEC §5.5's defaults.
	statuses := []int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout}
	for s := range tx.StatusSources {
		if !slices.Contains(statuses, s) {
			statuses = append(statuses, s)
		}
	}
	slices.Sort(statuses)
	for _, s := range statuses {
		name := strconv.Itoa(s)
		if _, ok := tx.StatusSources[s]; ok {
			name += "_mapped_by_layout"
		}
		body := `{"error":"` + strings.ToLower(http.StatusText(s)) + `"}`
		add(tcase{name: name, want: statusCode(tx, s, generated.RspHTTP500), answer: answer{status: s, body: jsonAnswer(body)}}, postedFirst, neverPosted)
	}

	// The other ways to an unknown outcome (SPEC §5.5).
	add(tcase{name: "never_answered", want: generated.RspReadTimeout, answer: answer{hold: untilGone}, timeout: neverAnsweredIn},
		postedFirst, neverPosted, postedLate)
	unusable := func(name string, body func(*generated.Transaction, string) string, says ...lookupSays) {
		add(tcase{name: name, want: generated.RspReadTimeout, answer: answer{status: http.StatusOK, body: body}}, says...)
	}
	unusable("200_undecodable", func(_ *generated.Transaction, guid string) string { return `{"guid":"` + guid + `","` }, postedFirst)
	unusable("200_not_the_layout", func(_ *generated.Transaction, guid string) string { return withGUID("{}", guid) }, postedFirst)
	if tx.Method == http.MethodPost {
		unusable("200_other_guid", func(tx *generated.Transaction, _ string) string { return okJSON(tx, testkit.GUID()) }, neverPosted)
		unusable("200_no_guid", func(tx *generated.Transaction, _ string) string { return sampleJSON(tx) }, postedFirst)
	}

	add(tcase{name: "connection_refused", refused: true, want: generated.RspConnectFail})
	for i := range cases {
		cases[i].tx, cases[i].kind = tx, answered
	}
	return cases
}

// unknownCases is c once for each thing the lookup may say of the UNKNOWN
// row it leaves, or once for a transaction settled without a lookup.
func unknownCases(tx *generated.Transaction, c tcase, says ...lookupSays) []tcase {
	if tx.Settle != generated.SettleByLookup {
		return []tcase{c}
	}
	var out []tcase
	for _, s := range says {
		v := c
		v.lookup = s
		v.answer.posts = s == postedFirst
		out = append(out, v)
	}
	return out
}

// statusCode is the code SPEC §5.5 gives a core status for tx: the
// layout's mapping, 504 an unknown outcome, else def.
func statusCode(tx *generated.Transaction, status int, def generated.RspCode) generated.RspCode {
	if src, ok := tx.StatusSources[status]; ok {
		return src.Code()
	}
	if status == http.StatusGatewayTimeout {
		return generated.RspReadTimeout
	}
	return def
}

// rejectedCases are tx's frames refused before any claim: an unknown
// TX_CODE (E101), and a header, a length or a field that breaks its rule
// (E102), a bad value derived from each field's kind.
func rejectedCases(t *testing.T, tx *generated.Transaction) []tcase {
	e102 := func(name string, mutate func(f []byte) []byte) tcase {
		return tcase{name: name, want: generated.RspBadFrame, frame: func(t *testing.T, guid string) []byte { return mutate(defaultFrame(t, tx, guid)) }}
	}
	cases := []tcase{
		{name: "unregistered_tx_code", want: generated.RspUnknownTx, frame: func(t *testing.T, guid string) []byte {
			f := defaultFrame(t, tx, guid)
			copy(f[generated.HeaderTxCodeOffset:], pad(unregistered(t, tx.Code), generated.HeaderTxCodeWidth))
			return f
		}},
		{name: "prefix_not_digits", want: generated.RspBadFrame, closes: true, frame: func(t *testing.T, guid string) []byte {
			f := defaultFrame(t, tx, guid)[:generated.PrefixLen]
			f[1] = 'X'
			return f
		}},
		e102("len_below_a_header", func(f []byte) []byte { return withLen(f[:generated.HeaderLen-1]) }),
		e102("guid_not_lowercase_hex", func(f []byte) []byte {
			g := f[generated.HeaderGUIDOffset : generated.HeaderGUIDOffset+generated.HeaderGUIDWidth]
			copy(g, strings.ToUpper(string(g)))
			g[0] = 'A'
			return f
		}),
		e102("flag_response", func(f []byte) []byte { f[generated.HeaderFlagOffset] = generated.FlagResponse[0]; return f }),
		e102("body_one_byte_short", func(f []byte) []byte { return withLen(f[:len(f)-1]) }),
		e102("body_one_byte_long", func(f []byte) []byte { return withLen(append(f, ' ')) }),
	}
	for _, fs := range tx.RequestFields {
		for _, bad := range badValues(fs) {
			name := "field_" + fs.Name + "_" + bad.why
			cases = append(cases, e102(name, func(f []byte) []byte {
				copy(f[generated.HeaderLen+fs.Offset:], pad(bad.value, fs.Len))
				return f
			}))
		}
		if fillsPath(tx, fs) && fs.Kind == "X" {
			for _, seg := range []badValue{{"empty", ""}, {"dot", "."}, {"dotdot", ".."}} {
				cases = append(cases, e102("field_"+fs.Name+"_path_segment_"+seg.why, func(f []byte) []byte {
					copy(f[generated.HeaderLen+fs.Offset:], pad(seg.value, fs.Len))
					return f
				}))
			}
		}
	}
	for i := range cases {
		cases[i].tx, cases[i].kind = tx, rejected
	}
	return cases
}

// badValue is a value that breaks a field's kind, and how.
type badValue struct{ why, value string }

// badValues derives values that break fs's kind (SPEC §2): letters in N,
// a code missing from its map in C, a byte that is not printable in X, an
// impossible time in T.
func badValues(fs generated.FieldSpec) []badValue {
	switch fs.Kind {
	case "N":
		bad := []badValue{{"letter_in_numeric", strings.Repeat("0", fs.Len-1) + "A"}, {"spaces_in_numeric", ""}}
		if fs.HasMin && fs.Min > 0 {
			bad = append(bad, badValue{"below_min", fmt.Sprintf("%0*d", fs.Len, fs.Min-1)})
		}
		return bad
	case "C":
		v := strings.Repeat("~", fs.Len)
		if slices.Contains(fs.Codes, v) {
			panic(fmt.Sprintf("field %s: %q is one of its codes: derive another", fs.Name, v))
		}
		return []badValue{{"not_in_code_map", v}}
	case "X":
		return []badValue{{"not_printable", "\x01"}}
	case "T":
		return []badValue{{"not_a_time", strings.Repeat("9", fs.Len)}}
	case "H":
		return []badValue{{"not_lowercase_hex", strings.Repeat("G", fs.Len)}}
	}
	panic(fmt.Sprintf("field %s: kind %q: derive its bad values here", fs.Name, fs.Kind))
}

// fillsPath reports whether fs's value fills a segment of tx's core call
// or lookup path.
func fillsPath(tx *generated.Transaction, fs generated.FieldSpec) bool {
	v := "{" + fs.JSON + "}"
	return strings.Contains(tx.Path, v) || strings.Contains(tx.LookupPath, v)
}

// unregistered is a TX_CODE like code that the registry does not hold.
func unregistered(t *testing.T, code string) string {
	for _, c := range "ZYXWVUTSRQ9876543210" {
		cand := code[:len(code)-1] + string(c)
		if _, ok := generated.LookupTransaction(cand); !ok {
			return cand
		}
	}
	t.Fatalf("no unregistered TX_CODE like %s", code)
	return ""
}

// defaultFrame is the request of tx a channel sends with every field left
// to the layout's default, and a valid value derived from its kind in a
// field that declares none.
func defaultFrame(t *testing.T, tx *generated.Transaction, guid string) []byte {
	t.Helper()
	fields := map[string]string{}
	for _, fs := range tx.RequestFields {
		if !fs.HasDefault {
			fields[fs.JSON] = validValue(t, tx, fs)
		}
	}
	return testkit.Frame(t, tx, guid, fields)
}

// validValue is a value fs holds, in the form Set takes: its code map's
// first code, its minimum, one character.
func validValue(t *testing.T, tx *generated.Transaction, fs generated.FieldSpec) string {
	switch fs.Kind {
	case "C":
		if len(fs.Codes) > 0 {
			return fs.Codes[0]
		}
	case "N":
		if fs.HasMin {
			return strconv.FormatInt(max(fs.Min, 1), 10)
		}
		return "1"
	case "X":
		return "A"
	case "T":
		return fixedwidth.FormatTimestamp(testkit.SentAt)
	case "H":
		return "a"
	}
	t.Fatalf("%s field %s: kind %q: derive its valid values here", tx.Code, fs.Name, fs.Kind)
	return ""
}

// otherBody is frame with one field changed to another valid value: the
// same GUID with a different request.
func otherBody(t *testing.T, tx *generated.Transaction, frame []byte) []byte {
	t.Helper()
	for _, fs := range tx.RequestFields {
		f := append([]byte(nil), frame...)
		last := generated.HeaderLen + fs.Offset + fs.Len - 1
		switch fs.Kind {
		case "N":
			f[last] = '1' + (f[last]-'0')%9 // another digit, never 0
		case "X":
			f[last] = 'A' + (f[last]-'A'+1)%26
		default:
			continue
		}
		if tx.NewRequest().Decode(string(f[generated.HeaderLen:])) == nil {
			return f
		}
	}
	t.Fatalf("%s: no field of the layout could be changed to another valid value", tx.Code)
	return nil
}

// withLen sets frame's length prefix to the bytes that follow it.
func withLen(frame []byte) []byte {
	copy(frame, fmt.Sprintf("%0*d", generated.PrefixLen, len(frame)-generated.PrefixLen))
	return frame
}

// pad left-aligns s in width bytes of spaces.
func pad(s string, width int) string {
	return s + strings.Repeat(" ", max(width-len(s), 0))
}
