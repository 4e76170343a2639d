package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

var (
	propSeed    = flag.Uint64("gen.seed", 1, "TestGeneratedProperty: seed of the synthetic layouts")
	propLayouts = flag.Int("gen.layouts", 12, "TestGeneratedProperty: how many synthetic transactions to generate (from 6 on, every kind in every role is asserted covered)")
)

// TestGeneratedProperty generates a set of synthetic transactions from a
// seeded random source — every field kind of the layout syntax in every
// role the syntax has, alone and combined — together with the real
// layouts into one temporary module, which must build and vet clean; its
// round-trip program (testdata/property) then checks, through the
// registry, the relay's parse and its core-call gate, that the values this
// test's own oracle chose travel unchanged (fixed width → decode → encode,
// → JSON and path, JSON → encode) and that every invalid one is refused
// with an error naming its layout and field. More: -gen.layouts=N,
// -gen.seed=S.
//
// The roles are the request body (fixed width, its JSON form, Set), the
// JSON body of the core call (body json), the response body, a {key}
// segment of the core path and of the lookup path, and {guid} in the
// lookup. The syntax has no query parameters: a path with ? or # is
// refused (validatePathShape), so there is no such role to test.
func TestGeneratedProperty(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	start := time.Now()
	txs := synthesize(*propSeed, *propLayouts)
	cov := coverage(txs)
	t.Logf("seed %d, %d synthetic transactions; covered:\n%s", *propSeed, len(txs), cov)
	if *propLayouts >= 6 {
		assert.NilError(t, cov.complete())
	}
	cases := oracle(rand.New(rand.NewPCG(*propSeed, 2)), txs)
	valid, invalid := 0, 0
	for _, tx := range cases.Txs {
		valid, invalid = valid+len(tx.Valid), invalid+len(tx.Invalid)
	}
	mod := propertyModule(t, txs, cases)
	generated := time.Since(start)
	goIn(t, mod, "build", "./internal/generated/")
	goIn(t, mod, "vet", "./internal/generated/", "./internal/proptest/")
	out := goIn(t, mod, "test", "-count=1", "./internal/proptest/")
	t.Logf("%d valid and %d invalid bodies: %s(generated in %v, %v in all)", valid, invalid, out,
		generated.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// TestSynthesizerCovers: six synthetic transactions hold every kind in
// every role, whatever the seed, so that TestGeneratedProperty's fixed set
// and any set -gen.seed asks for test them all; and the generator accepts
// them.
func TestSynthesizerCovers(t *testing.T) {
	real, err := Load("../layouts")
	assert.NilError(t, err)
	for seed := range uint64(300) {
		txs := synthesize(seed, 6)
		assert.NilError(t, coverage(txs).complete(), "seed %d", seed)
		if seed >= 20 {
			continue // loading is what takes the time; FuzzGeneratedCompiles loads more
		}
		l, err := loadSynthetic(t, txs)
		assert.NilError(t, err, "seed %d: the generator refuses a synthetic layout", seed)
		assert.Equal(t, len(l.Txs), len(real.Txs)+len(txs))
	}
}

// loadSynthetic loads the real layouts with the synthetic ones.
func loadSynthetic(t *testing.T, txs []*synTx) (*Layouts, error) {
	t.Helper()
	layouts := filepath.Join(t.TempDir(), "layouts")
	copyDir(t, "../layouts", layouts)
	writeSynthetic(t, layouts, txs)
	return Load(layouts)
}

// The synthetic field kinds: every kind of the syntax, with each option
// that changes how a value is carried or checked.
type synKind int

const (
	synText   synKind = iota // X
	synInt                   // N carried as an int64
	synDigits                // N with option string
	synMin                   // N with min=
	synCode                  // C through the synthetic code map
	synTime                  // T
	synHex                   // H
	synKinds
)

var synKindNames = [synKinds]string{"X text", "N int64", "N string", "N min=", "C code map", "T timestamp", "H hex"}

type synRole int

const (
	roleRequest    synRole = iota // a request body field: fixed width, its JSON form, Set
	roleJSONBody                  // carried in the core call's JSON body (body json)
	roleResponse                  // a response body field: the core's JSON answer → fixed width
	roleCorePath                  // fills a {key} segment of the core path
	roleLookupPath                // fills a {key} segment of the lookup path
	synRoles
)

var synRoleNames = [synRoles]string{"request body", "JSON body of the call", "response body", "core path {key}", "lookup path {key}"}

// synCodes is the synthetic code map PQMAP: wire codes of several widths,
// core ids a path must escape, and two that are dot segments (fine in
// JSON, never in a path).
var synCodes = []struct{ wire, core string }{
	{"1", "ONE"}, {"22", "T W"}, {"333", "A/B"}, {"4", "."}, {"55", ".."}, {"6", "%41"}, {"7", "x?y"}, {"8", `a\b`}, {"9Z", "Z9"},
}

// synNames are field names a generated local could clash with: Go's
// keywords and predeclared names, the generated functions' parameters and
// locals, the packages they import, and a field next to its segment.
var synNames = []string{
	"CCY", "TENOR", "ACCT", "BANK", "BANK_SEG", "MEMO", "TYPE", "R", "DST", "OK", "NIL", "LEN", "APPEND",
	"STRING", "STRCONV", "FIXEDWIDTH", "URL", "FMT", "COREJSON", "GUID", "TRUE", "S", "V", "ERR", "START", "CODE",
}

type synField struct {
	Name, JSON       string
	Kind             synKind
	Len              int
	Min              int64
	Account          bool
	Default          string
	HasDefault       bool
	VaryMin, VaryMax int64
	Vary             bool
	InCore, InLookup bool
}

type synTx struct {
	Code, Method, Body   string
	Lookup               bool // lookup GET …; else lookup none
	CorePath, LookupPath string
	Req, Rsp             []*synField
}

type synthesizer struct {
	rng  *rand.Rand
	need [synKinds][synRoles]bool
}

// synthesize builds n transactions. The first four are the shapes the
// syntax allows (GET with lookup none, GET with a lookup, POST with a JSON
// body, POST without), the first one alone (one integer filling the core
// path, as an exchange rate's tenor) and the second empty (no field at
// all); after them each transaction takes the kinds and roles no earlier
// one has (with a JSON body while a kind lacks one), then some at random.
// Six transactions cover every kind in every role.
func synthesize(seed uint64, n int) []*synTx {
	return synthesizeFrom(rand.New(rand.NewPCG(seed, 1)), n)
}

func synthesizeFrom(rng *rand.Rand, n int) []*synTx {
	s := &synthesizer{rng: rng}
	for k := range synKinds {
		for r := range synRoles {
			s.need[k][r] = true
		}
	}
	var txs []*synTx
	for i := range n {
		txs = append(txs, s.tx(i))
	}
	return txs
}

func (s *synthesizer) tx(i int) *synTx {
	shapes := []struct {
		method, body string
		lookup       bool
	}{{"GET", "none", false}, {"POST", "json", true}, {"GET", "none", true}, {"POST", "none", true}}
	sh := shapes[s.rng.IntN(len(shapes))]
	switch {
	case i < len(shapes):
		sh = shapes[i]
	case s.needs(roleJSONBody):
		sh = shapes[1] // the only shape with a JSON body
	}
	tx := &synTx{Code: fmt.Sprintf("BKPQ%04d", i+1), Method: sh.method, Body: sh.body, Lookup: sh.lookup}
	reqNames, rspNames := map[string]bool{}, map[string]bool{}
	switch i {
	case 0:
		f := s.field(synInt, reqNames, true)
		f.InCore = true
		tx.Req = append(tx.Req, f)
		tx.Rsp = append(tx.Rsp, s.field(synKind(s.rng.IntN(int(synKinds))), rspNames, false))
	case 1:
	default:
		jsonBody := tx.Body == "json"
		for k := range synKinds {
			if len(tx.Req) < 4 && (s.need[k][roleRequest] || jsonBody && s.need[k][roleJSONBody] || s.need[k][roleCorePath] || tx.Lookup && s.need[k][roleLookupPath]) {
				f := s.field(k, reqNames, true)
				f.InCore = s.need[k][roleCorePath] || s.rng.IntN(3) == 0
				f.InLookup = tx.Lookup && (s.need[k][roleLookupPath] || s.rng.IntN(3) == 0)
				tx.Req = append(tx.Req, f)
			}
			if len(tx.Rsp) < 4 && s.need[k][roleResponse] {
				tx.Rsp = append(tx.Rsp, s.field(k, rspNames, false))
			}
		}
		for range s.rng.IntN(3) {
			f := s.field(synKind(s.rng.IntN(int(synKinds))), reqNames, true)
			f.InCore = s.rng.IntN(3) == 0
			f.InLookup = tx.Lookup && s.rng.IntN(3) == 0
			tx.Req = append(tx.Req, f)
		}
		for range s.rng.IntN(3) {
			tx.Rsp = append(tx.Rsp, s.field(synKind(s.rng.IntN(int(synKinds))), rspNames, false))
		}
		s.rng.Shuffle(len(tx.Req), func(a, b int) { tx.Req[a], tx.Req[b] = tx.Req[b], tx.Req[a] })
		s.rng.Shuffle(len(tx.Rsp), func(a, b int) { tx.Rsp[a], tx.Rsp[b] = tx.Rsp[b], tx.Rsp[a] })
	}
	tx.CorePath = s.path("/v1/"+strings.ToLower(tx.Code), tx.Req, func(f *synField) bool { return f.InCore }, false)
	if tx.Lookup {
		tx.LookupPath = s.path("/v1/"+strings.ToLower(tx.Code)+"/lookup", tx.Req, func(f *synField) bool { return f.InLookup }, i < 4 || s.rng.IntN(4) > 0)
	}
	for _, f := range tx.Req {
		s.need[f.Kind][roleRequest] = false
		if tx.Body == "json" {
			s.need[f.Kind][roleJSONBody] = false
		}
		if f.InCore {
			s.need[f.Kind][roleCorePath] = false
		}
		if f.InLookup {
			s.need[f.Kind][roleLookupPath] = false
		}
	}
	for _, f := range tx.Rsp {
		s.need[f.Kind][roleResponse] = false
	}
	return tx
}

// needs reports whether a kind has no field in role r yet.
func (s *synthesizer) needs(r synRole) bool {
	for k := range synKinds {
		if s.need[k][r] {
			return true
		}
	}
	return false
}

// path is base with a {key} segment for each field that fills it, in
// random order among literal segments, sometimes one of them twice, and
// with guid a {guid} segment.
func (s *synthesizer) path(base string, fields []*synField, fills func(*synField) bool, guid bool) string {
	var segs []string
	for _, f := range fields {
		if fills(f) {
			segs = append(segs, "{"+f.JSON+"}")
		}
	}
	if len(segs) > 0 && s.rng.IntN(5) == 0 {
		segs = append(segs, segs[s.rng.IntN(len(segs))])
	}
	if guid {
		segs = append(segs, "{guid}")
	}
	for range s.rng.IntN(3) {
		segs = append(segs, fmt.Sprintf("s%d", s.rng.IntN(100)))
	}
	s.rng.Shuffle(len(segs), func(a, b int) { segs[a], segs[b] = segs[b], segs[a] })
	if len(segs) == 0 {
		return base
	}
	return base + "/" + strings.Join(segs, "/")
}

// field draws a field of kind k, named so that its Go name is new in its
// section, with the options a layout may give it.
func (s *synthesizer) field(k synKind, taken map[string]bool, request bool) *synField {
	name := synNames[s.rng.IntN(len(synNames))]
	key := func(name string) string {
		if k := lowerFirst(goName(name)); !strings.EqualFold(k, "guid") {
			return k
		}
		return "theGUID" // the JSON carries the header's GUID under guid, in any case
	}
	for n := 2; taken[goName(name)] || taken[strings.ToLower(key(name))]; n++ {
		name = fmt.Sprintf("%s_%d", synNames[s.rng.IntN(len(synNames))], n)
	}
	taken[goName(name)], taken[strings.ToLower(key(name))] = true, true
	f := &synField{Name: name, JSON: key(name), Kind: k, Account: s.rng.IntN(4) == 0}
	switch k {
	case synText:
		f.Len = 1 + s.rng.IntN(24)
	case synInt:
		f.Len = 1 + s.rng.IntN(18)
	case synDigits:
		f.Len = 1 + s.rng.IntN(30)
	case synMin:
		f.Len = 1 + s.rng.IntN(18)
		f.Min = []int64{0, 1, s.rng.Int64N(maxInt(f.Len) + 1)}[s.rng.IntN(3)]
	case synCode:
		f.Len = 3 + s.rng.IntN(4)
	case synTime:
		f.Len = 14
	case synHex:
		f.Len = 1 + s.rng.IntN(40)
	}
	if request && s.rng.IntN(3) == 0 {
		f.Default, f.HasDefault = s.defaultValue(f), true
	}
	if request && (k == synInt || k == synMin) && s.rng.IntN(3) == 0 {
		f.VaryMin = f.Min + s.rng.Int64N(maxInt(f.Len)-f.Min+1)
		f.VaryMax = f.VaryMin + s.rng.Int64N(maxInt(f.Len)-f.VaryMin+1)
		f.Vary = true
	}
	return f
}

// defaultValue is a value for default=: one word with no # or quote, a
// code given as its wire code or its core id.
func (s *synthesizer) defaultValue(f *synField) string {
	switch f.Kind {
	case synText:
		return randomFrom(s.rng, "abcXYZ0189-_.", 1+s.rng.IntN(f.Len))
	case synCode:
		c := synCodes[s.rng.IntN(len(synCodes))]
		if s.rng.IntN(2) == 0 && !strings.Contains(c.core, " ") {
			return c.core
		}
		return c.wire
	}
	return strings.TrimLeft(validValue(s.rng, f, false).Wire, " ")
}

func maxInt(digits int) int64 {
	v, _ := strconv.ParseInt(strings.Repeat("9", digits), 10, 64)
	return v
}

func randomFrom(rng *rand.Rand, chars string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = chars[rng.IntN(len(chars))]
	}
	return string(b)
}

// coverage counts the synthetic fields of each kind in each role.
func coverage(txs []*synTx) covered {
	var c covered
	for _, tx := range txs {
		for _, f := range tx.Req {
			c[f.Kind][roleRequest]++
			if tx.Body == "json" {
				c[f.Kind][roleJSONBody]++
			}
			if f.InCore {
				c[f.Kind][roleCorePath]++
			}
			if f.InLookup {
				c[f.Kind][roleLookupPath]++
			}
		}
		for _, f := range tx.Rsp {
			c[f.Kind][roleResponse]++
		}
	}
	return c
}

type covered [synKinds][synRoles]int

// complete says which kind lacks a field in which role, if one does.
func (c covered) complete() error {
	for k := range synKinds {
		for r := range synRoles {
			if c[k][r] == 0 {
				return fmt.Errorf("no %s field in the role %s", synKindNames[k], synRoleNames[r])
			}
		}
	}
	return nil
}

func (c covered) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s", "")
	for r := range synRoles {
		fmt.Fprintf(&b, " | %s", synRoleNames[r])
	}
	for k := range synKinds {
		fmt.Fprintf(&b, "\n%-12s", synKindNames[k])
		for r := range synRoles {
			fmt.Fprintf(&b, " | %*d", len(synRoleNames[r]), c[k][r])
		}
	}
	return b.String()
}

// layout writes the transaction's layout file.
func (tx *synTx) layout() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: a synthetic transaction of gen's TestGeneratedProperty.\n", tx.Code)
	fmt.Fprintf(&b, "transaction %s \"synthetic %s\"\n", tx.Code, strings.ToLower(tx.Code))
	fmt.Fprintf(&b, "core %s %s\n", tx.Method, tx.CorePath)
	if tx.Lookup {
		fmt.Fprintf(&b, "lookup GET %s\n", tx.LookupPath)
	} else {
		b.WriteString("lookup none\n")
	}
	fmt.Fprintf(&b, "body %s\n", tx.Body)
	for _, sec := range []struct {
		name   string
		fields []*synField
	}{{"request", tx.Req}, {"response", tx.Rsp}} {
		fmt.Fprintf(&b, "\n%s %d\n", sec.name, sectionLen(sec.fields))
		at := 0
		for _, f := range sec.fields {
			kind, opts := "X", []string{}
			switch f.Kind {
			case synInt:
				kind = "N"
			case synDigits:
				kind, opts = "N", append(opts, "string")
			case synMin:
				kind, opts = "N", append(opts, fmt.Sprintf("min=%d", f.Min))
			case synCode:
				kind, opts = "C", append(opts, "map=PQMAP")
			case synTime:
				kind = "T"
			case synHex:
				kind = "H"
			}
			if f.Account {
				opts = append(opts, "account")
			}
			if f.HasDefault {
				opts = append(opts, "default="+f.Default)
			}
			if f.Vary {
				opts = append(opts, fmt.Sprintf("vary=%d..%d", f.VaryMin, f.VaryMax))
			}
			fmt.Fprintf(&b, "%-14s %4d %3d  %s  %-14s %s\n", f.Name, at, f.Len, kind, f.JSON, strings.Join(opts, " "))
			at += f.Len
		}
	}
	return b.String()
}

func sectionLen(fields []*synField) int {
	n := 0
	for _, f := range fields {
		n += f.Len
	}
	return n
}

func codeMapFile() string {
	var b strings.Builder
	b.WriteString("# PQMAP: the synthetic code map of gen's TestGeneratedProperty.\ncodemap PQMAP \"synthetic codes\"\n")
	for _, c := range synCodes {
		core := c.core
		if strings.Contains(core, " ") {
			core = `"` + core + `"` // one word; the syntax has no escapes
		}
		fmt.Fprintf(&b, "%s %s\n", c.wire, core)
	}
	return b.String()
}

// The cases the round-trip program reads (testdata/property/roundtrip_test.go
// declares the same types).
type propCases struct {
	GUID string
	Txs  []propTx
}

type propTx struct {
	Code     string
	Method   string
	JSONBody bool
	Lookup   bool
	Fields   []propSpec
	Valid    []propValid
	Invalid  []propInvalid
}

type propSpec struct {
	Name, JSON, Kind string
	Offset, Len      int
	Default          string
	HasDefault       bool
}

type propValid struct {
	Request  bool
	Body     string
	JSON     []propPair
	JSONText string
	CorePath string
	Lookup   string
}

type propPair struct {
	Key, Value string
	Int        bool
}

type propInvalid struct {
	Request   bool
	Stage     string
	Body      string
	Key       string
	Value     string
	JSONText  string
	Field     string
	InLookup  bool
	Printable bool
	MapError  bool
	Why       string
}

// synValue is one value of a field in each of its forms.
type synValue struct {
	Wire string // the field's bytes in the body
	JSON string // in the core's JSON: a string's text, an integer's digits
}

// validValue draws a value the field takes; with inPath one that fills a
// path segment (a code whose core id is no dot segment, text that is not
// empty or dots).
func validValue(rng *rand.Rand, f *synField, inPath bool) synValue {
	for range 100 {
		v := drawValue(rng, f)
		if !inPath || oneSegment(v.JSON) {
			return v
		}
	}
	// A source that keeps drawing values that cannot fill a path (the
	// fuzzer's bytes can) ends here.
	if f.Kind == synCode {
		return synValue{synCodes[0].wire + strings.Repeat(" ", f.Len-len(synCodes[0].wire)), synCodes[0].core}
	}
	return synValue{"x" + strings.Repeat(" ", f.Len-1), "x"}
}

func oneSegment(s string) bool { return s != "" && s != "." && s != ".." }

// synText's characters: a path must escape several, JSON two.
const textChars = `abcXYZ019 /%?#.&=+-_~:@!$'()*,;"\`

func drawValue(rng *rand.Rand, f *synField) synValue {
	switch f.Kind {
	case synText:
		s := strings.TrimRight(randomFrom(rng, textChars, rng.IntN(f.Len+1)), " ")
		if rng.IntN(6) == 0 {
			s = []string{"...", ".a", "a/b", "%2E", " x"}[rng.IntN(5)]
			if len(s) > f.Len {
				s = s[:f.Len]
			}
			s = strings.TrimRight(s, " ")
		}
		return synValue{s + strings.Repeat(" ", f.Len-len(s)), s}
	case synInt, synMin:
		hi := maxInt(f.Len)
		v := f.Min + rng.Int64N(hi-f.Min+1)
		switch rng.IntN(4) {
		case 0:
			v = f.Min
		case 1:
			v = hi
		}
		return synValue{fmt.Sprintf("%0*d", f.Len, v), strconv.FormatInt(v, 10)}
	case synDigits:
		s := randomFrom(rng, "0123456789", f.Len)
		return synValue{s, s}
	case synCode:
		c := synCodes[rng.IntN(len(synCodes))]
		return synValue{c.wire + strings.Repeat(" ", f.Len-len(c.wire)), c.core}
	case synTime:
		s := randomTime(rng)
		return synValue{s, s}
	case synHex:
		s := randomFrom(rng, "0123456789abcdef", f.Len)
		return synValue{s, s}
	}
	panic("unknown kind")
}

// randomTime is a real YYYYMMDDhhmmss of any year 0000–9999, now and then
// the 29th of February of a leap year.
func randomTime(rng *rand.Rand) string {
	if rng.IntN(4) == 0 {
		year := []string{"0000", "1600", "1996", "2000", "2024", "2400"}[rng.IntN(6)]
		return fmt.Sprintf("%s0229%02d%02d%02d", year, rng.IntN(24), rng.IntN(60), rng.IntN(60))
	}
	t := time.Date(rng.IntN(10000), time.Month(1+rng.IntN(12)), 1, 0, 0, 0, 0, time.UTC)
	t = t.AddDate(0, 0, rng.IntN(daysInMonth(t)))
	return fmt.Sprintf("%04d%02d%02d%02d%02d%02d", t.Year(), t.Month(), t.Day(), rng.IntN(24), rng.IntN(60), rng.IntN(60))
}

func daysInMonth(t time.Time) int { return t.AddDate(0, 1, -t.Day()).Day() }

// badTimes are 14 characters that are no date and time.
var badTimes = []string{
	"20260230120000", "20250229120000", "19000229000000", "20261301000000", "20260001000000",
	"20260100000000", "20260101240000", "20260101126000", "20260101120060", "2026010112000x",
}

func jsonString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func jsonText(pairs []propPair, extra string) string {
	var b strings.Builder
	b.WriteString("{")
	for i, p := range pairs {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(jsonString(p.Key) + ":")
		if p.Int {
			b.WriteString(p.Value)
		} else {
			b.WriteString(jsonString(p.Value))
		}
	}
	if extra != "" {
		if len(pairs) > 0 {
			b.WriteString(",")
		}
		b.WriteString(extra)
	}
	b.WriteString("}")
	return b.String()
}

// oracle chooses the values of each transaction and writes down, without
// the generated code, what each must become: the body, the JSON, the
// paths; and the invalid values with the field their refusal must name.
func oracle(rng *rand.Rand, txs []*synTx) propCases {
	const guid = "0123456789abcdef0123456789abcdef"
	c := propCases{GUID: guid}
	for _, tx := range txs {
		pt := propTx{Code: tx.Code, Method: tx.Method, JSONBody: tx.Body == "json", Lookup: tx.Lookup}
		at := 0
		for _, f := range tx.Req {
			kind := map[synKind]string{synText: "X", synInt: "N", synDigits: "N", synMin: "N", synCode: "C", synTime: "T", synHex: "H"}[f.Kind]
			pt.Fields = append(pt.Fields, propSpec{f.Name, f.JSON, kind, at, f.Len, f.Default, f.HasDefault})
			at += f.Len
		}
		for range 3 {
			pt.Valid = append(pt.Valid, validCase(rng, tx, guid, true), validCase(rng, tx, guid, false))
		}
		pt.Invalid = append(invalidCases(rng, tx, guid, true), invalidCases(rng, tx, guid, false)...)
		c.Txs = append(c.Txs, pt)
	}
	return c
}

func isInt(f *synField) bool { return f.Kind == synInt || f.Kind == synMin }

// draw is one valid value for each field of a section.
func draw(rng *rand.Rand, fields []*synField) []synValue {
	vals := make([]synValue, len(fields))
	for i, f := range fields {
		vals[i] = validValue(rng, f, f.InCore || f.InLookup)
	}
	return vals
}

func body(vals []synValue) string {
	var b strings.Builder
	for _, v := range vals {
		b.WriteString(v.Wire)
	}
	return b.String()
}

func jsonPairs(fields []*synField, vals []synValue, guid string) []propPair {
	ps := []propPair{}
	if guid != "" {
		ps = append(ps, propPair{Key: "guid", Value: guid})
	}
	for i, f := range fields {
		ps = append(ps, propPair{Key: f.JSON, Value: vals[i].JSON, Int: isInt(f)})
	}
	return ps
}

// fill is a path template with each {key} replaced by its value, escaped.
func fill(template string, fields []*synField, vals []synValue, guid string) string {
	out := template
	for i, f := range fields {
		out = strings.ReplaceAll(out, "{"+f.JSON+"}", url.PathEscape(vals[i].JSON))
	}
	return strings.ReplaceAll(out, "{guid}", guid)
}

func validCase(rng *rand.Rand, tx *synTx, guid string, request bool) propValid {
	if !request {
		vals := draw(rng, tx.Rsp)
		ps := jsonPairs(tx.Rsp, vals, "")
		return propValid{Body: body(vals), JSON: ps, JSONText: jsonText(ps, `"guid":"`+guid+`","extra":{"n":[1,null,"x"]}`)}
	}
	vals := draw(rng, tx.Req)
	ps := jsonPairs(tx.Req, vals, guid)
	v := propValid{Request: true, Body: body(vals), JSON: ps, JSONText: jsonText(ps, ""), CorePath: fill(tx.CorePath, tx.Req, vals, "")}
	if tx.Lookup {
		v.Lookup = fill(tx.LookupPath, tx.Req, vals, guid)
	}
	return v
}

// invalidCases are, for each field of a section, values it must refuse:
// in the fixed-width body, in a path segment, and in the core's JSON.
func invalidCases(rng *rand.Rand, tx *synTx, guid string, request bool) []propInvalid {
	fields, jsonGUID := tx.Rsp, ""
	if request {
		fields, jsonGUID = tx.Req, guid
	}
	var out []propInvalid
	for i, f := range fields {
		vals := draw(rng, fields)
		with := func(wire string) string {
			vs := slices.Clone(vals)
			vs[i].Wire = wire
			return body(vs)
		}
		pad := func(s string) string { return s + strings.Repeat(" ", f.Len-len(s)) }
		put := func(s string, at int, c byte) string { return s[:at] + string(c) + s[at+1:] }
		at := rng.IntN(f.Len)
		decode := func(wire, why string) {
			out = append(out, propInvalid{Request: request, Stage: "decode", Body: with(wire), Field: f.Name,
				Printable: !strings.ContainsAny(wire, "\x7f\t"), Why: f.Name + ": " + why})
		}
		jsonBad := func(value string, isInt, mapErr bool, why string) {
			ps := jsonPairs(fields, vals, jsonGUID)
			ps[i+len(ps)-len(fields)] = propPair{Key: f.JSON, Value: value, Int: isInt}
			out = append(out, propInvalid{Request: request, Stage: "json", JSONText: jsonText(ps, ""), Key: f.JSON,
				Field: f.Name, MapError: mapErr, Why: f.Name + ": " + why})
		}
		switch f.Kind {
		case synText:
			decode(put(vals[i].Wire, at, "\x7f\t"[rng.IntN(2)]), "not printable")
			jsonBad(strings.Repeat("w", f.Len+1), false, false, "longer than the field")
		case synInt, synMin, synDigits:
			decode(put(vals[i].Wire, at, "xA-+ ."[rng.IntN(6)]), "not a digit")
			if f.Kind == synMin && f.Min > 0 {
				below := rng.Int64N(f.Min)
				decode(fmt.Sprintf("%0*d", f.Len, below), "below min")
				jsonBad(strconv.FormatInt(below, 10), true, false, "below min in JSON")
			}
			if isInt(f) {
				jsonBad("1"+strings.Repeat("0", f.Len), true, false, "more digits than the field")
				jsonBad("-1", true, false, "negative")
			} else {
				jsonBad(strings.Repeat("7", f.Len+1), false, false, "more digits than the field")
				jsonBad("", false, false, "empty")
				jsonBad("1x", false, false, "not digits")
			}
		case synCode:
			decode(pad([]string{"Z", "", "0", "99"}[rng.IntN(4)]), "not a code of the map")
			jsonBad("NOPE", false, true, "not a core id of the map")
		case synTime:
			decode(badTimes[rng.IntN(len(badTimes))], "not a date and time")
			jsonBad(badTimes[rng.IntN(len(badTimes))], false, false, "not a date and time in JSON")
			jsonBad("2026", false, false, "too short")
		case synHex:
			decode(put(vals[i].Wire, at, "gAG -"[rng.IntN(5)]), "not lowercase hex")
			jsonBad(strings.Repeat("a", f.Len+1), false, false, "longer than the field")
			jsonBad(strings.Repeat("F", f.Len), false, false, "upper-case hex")
		}
		if !request || !f.InCore && !f.InLookup {
			continue
		}
		// A value that cannot fill its path segment: the frame decodes,
		// the core call is never prepared.
		path := func(wire, why string) {
			out = append(out, propInvalid{Request: true, Stage: "path", Body: with(wire), Field: f.Name, InLookup: f.InLookup, Why: f.Name + ": " + why})
		}
		switch f.Kind {
		case synText:
			path(pad(""), "empty (all spaces)")
			path(pad("."), "a dot")
			if f.Len >= 2 {
				path(pad(".."), "two dots")
			}
		case synCode:
			for _, c := range synCodes {
				if !oneSegment(c.core) {
					path(pad(c.wire), fmt.Sprintf("code %s, core id %q", c.wire, c.core))
				}
			}
		}
		if isInt(f) {
			continue
		}
		for _, bad := range []string{"", ".", ".."} {
			out = append(out, propInvalid{Request: true, Stage: "set", Body: body(vals), Key: f.JSON, Value: bad,
				Field: f.Name, InLookup: f.InLookup, Why: fmt.Sprintf("%s: set to %q", f.Name, bad)})
		}
	}
	return out
}

// propertyModule writes a temporary module: the layouts (the real ones
// and the synthetic ones) generated into internal/generated, the packages
// of the relay's parse and core call (wire, corecall and what they import)
// copied beside them, and the round-trip program with its cases.
func propertyModule(t *testing.T, txs []*synTx, cases propCases) string {
	t.Helper()
	root, err := filepath.Abs("..")
	assert.NilError(t, err)
	mod := t.TempDir()
	layouts := filepath.Join(mod, "layouts")
	copyDir(t, "../layouts", layouts)
	write := func(path, text string) {
		assert.NilError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		assert.NilError(t, os.WriteFile(path, []byte(text), 0o644))
	}
	writeSynthetic(t, layouts, txs)
	err = run(layouts, filepath.Join(mod, "internal", "generated"), "generated")
	assert.NilError(t, err, "the generator refuses a synthetic layout (see %s)", layouts)

	for _, name := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(root, name))
		assert.NilError(t, err)
		write(filepath.Join(mod, name), string(data))
	}
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{.Dir}}{{end}}", "./internal/corecall", "./internal/wire")
	cmd.Dir = root
	list, err := cmd.Output()
	assert.NilError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		pkg, dir, _ := strings.Cut(line, " ")
		if pkg == "lhrelay/internal/generated" {
			continue
		}
		rel, err := filepath.Rel(root, dir)
		assert.NilError(t, err)
		entries, err := os.ReadDir(dir)
		assert.NilError(t, err)
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			assert.NilError(t, err)
			write(filepath.Join(mod, rel, e.Name()), string(data))
		}
	}
	program, err := os.ReadFile("testdata/property/roundtrip_test.go")
	assert.NilError(t, err)
	write(filepath.Join(mod, "internal", "proptest", "roundtrip_test.go"), string(program))
	data, err := json.MarshalIndent(cases, "", " ")
	assert.NilError(t, err)
	write(filepath.Join(mod, "internal", "proptest", "testdata", "cases.json"), string(data))
	return mod
}

// writeSynthetic writes the synthetic code map and transactions into the
// layouts folder dir.
func writeSynthetic(t *testing.T, dir string, txs []*synTx) {
	t.Helper()
	assert.NilError(t, os.WriteFile(filepath.Join(dir, "PQMAP.codemap"), []byte(codeMapFile()), 0o644))
	for _, tx := range txs {
		assert.NilError(t, os.WriteFile(filepath.Join(dir, tx.Code+".layout"), []byte(tx.layout()), 0o644))
	}
}

// goIn runs the go command in dir, offline, with the caller's build cache.
func goIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS="+os.Getenv("GOFLAGS")+" -mod=mod", "GOPROXY=off", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	assert.NilError(t, err, "go %s in %s:\n%s", strings.Join(args, " "), dir, out)
	return string(out)
}

// FuzzGeneratedCompiles draws synthetic layouts from the fuzzer's bytes
// (the same synthesizer as TestGeneratedProperty, its random source
// reading the bytes), which the generator must accept, and type-checks
// what it renders in process: no module build per set, where
// TestGeneratedProperty builds, vets and runs one. Its seeds run in plain
// go test; go test -run '^$' -fuzz FuzzGeneratedCompiles ./gen/ fuzzes it,
// slowly (the engine's instrumentation makes a render take seconds). It
// checks compiling only: vet's findings and the round trips are
// TestGeneratedProperty's.
func FuzzGeneratedCompiles(f *testing.F) {
	if testing.Short() {
		f.Skip("builds the export data of the packages the generated code imports")
	}
	f.Add([]byte{})
	f.Add([]byte{5, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte("\x03transaction BKFX0001 \"exchange rate\" core GET /v1/rates/{ccy}/{tenor}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		n := 1
		if len(data) > 0 {
			n, data = 1+int(data[0])%6, data[1:]
		}
		txs := synthesizeFrom(rand.New(&fuzzSource{data: data}), n)
		l, err := loadSynthetic(t, txs)
		assert.NilError(t, err, "the generator refuses a synthetic layout")
		files, err := Render(l, "generated")
		assert.NilError(t, err)
		typeCheck(t, files)
	})
}

// fuzzSource is a rand.Source that reads the fuzzer's bytes, so that the
// fuzzer's mutations change the layouts directly, and then goes on with a
// fixed sequence: a source stuck at one value would keep rand's unbiased
// draws (IntN) rejecting it forever.
type fuzzSource struct {
	data []byte
	next *rand.PCG
}

func (s *fuzzSource) Uint64() uint64 {
	if len(s.data) == 0 {
		if s.next == nil {
			s.next = rand.NewPCG(1, 2)
		}
		return s.next.Uint64()
	}
	var b [8]byte
	s.data = s.data[copy(b[:], s.data):]
	return binary.LittleEndian.Uint64(b[:])
}

// typeCheck type-checks the rendered files as one package, importing the
// module's packages and the standard library from their export data.
func typeCheck(t *testing.T, files map[string][]byte) {
	t.Helper()
	fset := token.NewFileSet()
	var parsed []*ast.File
	for name, src := range files {
		f, err := parser.ParseFile(fset, name, src, 0)
		assert.NilError(t, err)
		parsed = append(parsed, f)
	}
	conf := types.Config{Importer: exportImporter(t), Error: func(err error) { t.Error(err) }}
	_, _ = conf.Check("lhrelay/internal/generated", fset, parsed, nil)
}

var (
	importOnce sync.Once
	imported   types.Importer
	importErr  error
)

// exportImporter is one importer for the process, reading the compiler's
// export data of the packages the generated code imports (and theirs),
// which one go list -export finds in the build cache, building it there
// if need be.
func exportImporter(t *testing.T) types.Importer {
	t.Helper()
	importOnce.Do(func() {
		cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}", fw, cj, "errors", "fmt", "net/url", "strconv")
		cmd.Dir = ".."
		out, err := cmd.Output()
		if err != nil {
			importErr = fmt.Errorf("go list -export: %w", err)
			return
		}
		exports := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			pkg, file, _ := strings.Cut(line, " ")
			exports[pkg] = file
		}
		imported = importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
			file, ok := exports[path]
			if !ok {
				return nil, fmt.Errorf("the generated code imports %s, which go list was not asked for", path)
			}
			return os.Open(file)
		})
	})
	assert.NilError(t, importErr)
	return imported
}
