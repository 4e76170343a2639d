package main

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"lhrelay/internal/fixedwidth"
)

// frameHeaderLen is fixed by SPEC §1: a header of any other length is not
// LH-STD, whatever the layout file says.
const frameHeaderLen = 80

var (
	txCodePattern  = regexp.MustCompile(`^[A-Z][A-Z0-9]*$`)
	jsonKeyPattern = regexp.MustCompile(`^[a-z][A-Za-z0-9]*$`)
	pathParam      = regexp.MustCompile(`\{([^{}]*)\}`)
	wholeParam     = regexp.MustCompile(`^\{[^{}]*\}$`)
	goIdent        = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
)

// validate checks the whole set of layouts. Everything the generated code
// relies on is checked here, so a broken layout never yields Go code that
// compiles into wrong behaviour.
func validate(l *Layouts, ps *Problems) {
	if l.Header == nil {
		ps.add("layouts", 0, "", "no header layout (a file starting with: header NAME 80)")
	} else {
		validateHeader(l, ps)
	}
	mapNames := make([]string, 0, len(l.Maps))
	for name := range l.Maps {
		mapNames = append(mapNames, name)
	}
	sort.Strings(mapNames)
	byGoName := map[string]*CodeMap{}
	for _, name := range mapNames {
		m := l.Maps[name]
		validateCodeMap(m, ps)
		if prev, ok := byGoName[goName(m.Name)]; ok {
			ps.add(m.File, m.Line, "", "code map %s makes the Go name %s, as code map %s in %s does: their functions would clash", m.Name, goName(m.Name), prev.Name, prev.File)
		}
		byGoName[goName(m.Name)] = m
	}
	seen := map[string]*Transaction{}
	for _, tx := range l.Txs {
		if prev, ok := seen[tx.Code]; ok {
			ps.add(tx.File, tx.Line, "", "duplicate transaction code %s (also in %s)", tx.Code, prev.File)
			continue
		}
		seen[tx.Code] = tx
		validateTransaction(l, tx, ps)
	}
	sort.Slice(l.Txs, func(i, j int) bool { return l.Txs[i].Code < l.Txs[j].Code })
	var clientDefault *Transaction
	for _, tx := range l.Txs {
		if !tx.ClientDefault {
			continue
		}
		if clientDefault != nil {
			ps.add(tx.File, tx.ClientDefaultLine, "", "client default is already declared by %s in %s", clientDefault.Code, clientDefault.File)
			continue
		}
		clientDefault = tx
	}
	validateRspMap(l, ps)
}

func validateHeader(l *Layouts, ps *Problems) {
	h := l.Header
	if h.Declared != frameHeaderLen {
		ps.add(h.File, h.Line, "", "the header is %d bytes; LH-STD headers are %d", h.Declared, frameHeaderLen)
	}
	validateSection(l, h.File, &h.Section, ps)
	byName := map[string]*Field{}
	for _, f := range h.Fields {
		byName[f.Name] = f
		if f.JSON != "" {
			ps.add(h.File, f.Line, f.Name, "header fields have no JSON key")
		}
	}
	for _, name := range headerFields {
		if byName[name] == nil {
			ps.add(h.File, h.Line, name, "the header must have this field: the relay reads it")
		}
	}
	if f := byName["LEN"]; f != nil && (!f.Prefix || f.Start != 0 || f.Kind != fixedwidth.Numeric) {
		ps.add(h.File, f.Line, "LEN", "must be the N field at start 0 with option prefix")
	}
	if f := byName["GUID"]; f != nil && f.Kind != fixedwidth.Hex {
		ps.add(h.File, f.Line, "GUID", "must be of kind H (lowercase hex)")
	}
	if f := byName["RSP_CODE"]; f != nil && (f.Len != 4 || f.Kind != fixedwidth.Text) {
		ps.add(h.File, f.Line, "RSP_CODE", "must be a 4-byte X field: response codes are 4 characters")
	}
	if f := byName["FLAG"]; f != nil {
		names := map[string]bool{}
		for _, v := range f.Values {
			names[v.Name] = true
		}
		if !names["Request"] || !names["Response"] {
			ps.add(h.File, f.Line, "FLAG", "needs values=…:Request,…:Response")
		}
	}
	for _, f := range h.Fields {
		if f.Prefix && f.Name != "LEN" {
			ps.add(h.File, f.Line, f.Name, "only LEN is the length prefix")
		}
	}
}

func validateTransaction(l *Layouts, tx *Transaction, ps *Problems) {
	file := tx.File
	if !txCodePattern.MatchString(tx.Code) {
		ps.add(file, tx.Line, "", "transaction code %q must be an upper-case letter, then upper-case letters and digits: the Go types are named after it", tx.Code)
	}
	if l.Header != nil {
		for _, f := range l.Header.Fields {
			if f.Name == "TX_CODE" && len(tx.Code) != f.Len {
				ps.add(file, tx.Line, "", "transaction code %q is %d characters; TX_CODE holds exactly %d", tx.Code, len(tx.Code), f.Len)
			}
		}
	}
	switch tx.Method {
	case "GET", "POST", "PUT", "DELETE":
	case "":
		ps.add(file, tx.Line, "", "no core directive (core METHOD PATH)")
	default:
		ps.add(file, tx.Line, "", "unknown HTTP method %q", tx.Method)
	}
	switch tx.Body {
	case "json":
		if tx.Method == "GET" {
			ps.add(file, tx.Line, "", "a GET call cannot carry a JSON body (body none)")
		}
	case "none":
	case "":
		ps.add(file, tx.Line, "", "no body directive (body json or body none)")
	default:
		ps.add(file, tx.Line, "", "body %q: want json or none", tx.Body)
	}
	if tx.Method != "" && !strings.HasPrefix(tx.Path, "/") {
		ps.add(file, tx.Line, "", "core path %q must start with /", tx.Path)
	}
	for _, sec := range []*Section{&tx.Request, &tx.Response} {
		if !sec.present {
			ps.add(file, tx.Line, "", "no %s section", map[*Section]string{&tx.Request: "request", &tx.Response: "response"}[sec])
			continue
		}
		validateSection(l, file, sec, ps)
	}
	for _, m := range pathParam.FindAllStringSubmatch(tx.Path, -1) {
		found := false
		for _, f := range tx.Request.Fields {
			found = found || f.JSON == m[1]
		}
		if !found {
			ps.add(file, tx.Line, "", "path parameter {%s} is no request field's JSON key", m[1])
		}
	}
	if strings.Count(tx.Path, "{") != len(pathParam.FindAllString(tx.Path, -1)) {
		ps.add(file, tx.Line, "", "path %q has an unbalanced brace", tx.Path)
	} else if tx.Method != "" {
		validatePathShape(file, tx.Line, "core path", tx.Path, ps)
	}
	validateLookup(tx, ps)
	statuses := map[int]bool{}
	for _, r := range tx.Status {
		if r.Status < 100 || r.Status > 599 {
			ps.add(file, r.Line, "", "HTTP status %d is out of range", r.Status)
		}
		if statuses[r.Status] {
			ps.add(file, r.Line, "", "HTTP status %d is mapped twice", r.Status)
		}
		statuses[r.Status] = true
		switch src, ok := lookupSource(r.Source); {
		case !ok:
			ps.add(file, r.Line, "", "unknown source %q for status %d (known: %s)", r.Source, r.Status, sourceNames())
		case !src.FromStatus:
			ps.add(file, r.Line, "", "status %d cannot mean %s: a core answer means the request reached it (use INSUFFICIENT_FUNDS, NO_ACCOUNT, LIMIT_EXCEEDED, HTTP500 or READ_TIMEOUT)", r.Status, r.Source)
		}
	}
}

// validateLookup checks the lookup directive: every transaction must say
// how its unknown outcome is settled, and only a read may say "none".
func validateLookup(tx *Transaction, ps *Problems) {
	lk := tx.Lookup
	switch {
	case lk.Line == 0:
		ps.add(tx.File, tx.Line, "", "no lookup directive: say how an unknown outcome is settled (lookup GET PATH, or lookup none for a transaction whose core call is a GET)")
	case lk.None && tx.Method != "" && tx.Method != "GET":
		ps.add(tx.File, lk.Line, "", "lookup none is only for a read (core GET); a %s may post, so only a lookup can tell whether it did", tx.Method)
	case lk.None:
	case lk.Method != "GET":
		ps.add(tx.File, lk.Line, "", "lookup method %q: a lookup is a GET (it must never post)", lk.Method)
	case !strings.HasPrefix(lk.Path, "/"):
		ps.add(tx.File, lk.Line, "", "lookup path %q must start with /", lk.Path)
	default:
		if strings.Count(lk.Path, "{") != len(pathParam.FindAllString(lk.Path, -1)) {
			ps.add(tx.File, lk.Line, "", "lookup path %q has an unbalanced brace", lk.Path)
		} else {
			validatePathShape(tx.File, lk.Line, "lookup path", lk.Path, ps)
		}
		for _, m := range pathParam.FindAllStringSubmatch(lk.Path, -1) {
			if m[1] == "guid" {
				continue
			}
			found := false
			for _, f := range tx.Request.Fields {
				found = found || f.JSON == m[1]
			}
			if !found {
				ps.add(tx.File, lk.Line, "", "lookup path parameter {%s} is neither {guid} nor a request field's JSON key", m[1])
			}
		}
	}
}

// validatePathShape checks what the generated code takes for granted of a
// path template with balanced braces: every {key} fills a whole segment
// alone, so that the check of its value (not empty, not . or ..; SPEC 2)
// is the check of the segment; there is no query or fragment, which the
// layout syntax does not have (a value there would be path-escaped, which
// leaves & and = as they are); and every byte can go in a request target.
func validatePathShape(file string, line int, what, path string, ps *Problems) {
	if strings.ContainsAny(path, "?#") {
		ps.add(file, line, "", "%s %q has a ? or #: a path has no query or fragment (request values fill path segments only)", what, path)
	}
	for i := 0; i < len(path); i++ {
		if path[i] <= ' ' || path[i] > '~' {
			ps.add(file, line, "", "%s %q holds a byte that cannot be sent in a request target (a space or not printable ASCII)", what, path)
			break
		}
	}
	for _, seg := range strings.Split(path, "/") {
		if strings.ContainsAny(seg, "{}") && !wholeParam.MatchString(seg) {
			ps.add(file, line, "", "%s %q: %s must be a whole segment alone (/…/{key}/…): a value is checked to fill exactly one segment", what, path, seg)
		}
	}
}

// methodNames are the methods of the generated type of each section: a
// field whose Go name is one of them would not compile.
var methodNames = map[string][]string{
	"header":   {"Decode", "AppendTo", "Fields", "AppendRawTo"},
	"request":  {"Decode", "AppendTo", "AppendCoreJSON", "CoreJSON", "FromCoreJSON", "Set", "Fields", "AppendFields", "TxCode", "Flag", "CorePath", "LookupPath"},
	"response": {"Decode", "AppendTo", "AppendCoreJSON", "CoreJSON", "FromCoreJSON", "Set", "Fields", "AppendFields", "TxCode", "Flag"},
}

// validateSection checks that the fields tile the section exactly and that
// each field's kind, width and options make sense together.
func validateSection(l *Layouts, file string, sec *Section, ps *Problems) {
	end := 0
	names, keys := map[string]bool{}, map[string]bool{}
	goNames := map[string]*Field{}
	for _, f := range sec.Fields {
		if f.Start < 0 || f.Len < 0 {
			continue // already reported as not a whole number
		}
		if f.Len == 0 {
			ps.add(file, f.Line, f.Name, "length 0")
		}
		switch {
		case f.Start > end:
			ps.add(file, f.Line, f.Name, "gap: starts at %d but the previous field ends at %d", f.Start, end)
		case f.Start < end:
			ps.add(file, f.Line, f.Name, "overlap: starts at %d but the previous field ends at %d", f.Start, end)
		}
		end = f.End()
		if names[f.Name] {
			ps.add(file, f.Line, f.Name, "duplicate field name")
		}
		names[f.Name] = true
		if gn := goName(f.Name); !f.Filler {
			if prev, ok := goNames[gn]; ok && prev.Name != f.Name {
				ps.add(file, f.Line, f.Name, "makes the Go name %s, as field %s at line %d does: the generated struct cannot hold both", gn, prev.Name, prev.Line)
			}
			goNames[gn] = f
			if slices.Contains(methodNames[sec.Name], gn) {
				ps.add(file, f.Line, f.Name, "makes the Go name %s, a method of the generated %s type: name the field otherwise", gn, sec.Name)
			}
		}
		if sec.Name != "header" {
			if !jsonKeyPattern.MatchString(f.JSON) {
				ps.add(file, f.Line, f.Name, "JSON key %q must be lowerCamelCase letters and digits", f.JSON)
			}
			// The core's JSON is read as encoding/json reads it: a key
			// matches regardless of case when no key matches exactly.
			if strings.EqualFold(f.JSON, "guid") {
				ps.add(file, f.Line, f.Name, "JSON key %s is reserved: the request's JSON, and the core's answer, carry the header's GUID under guid (keys are matched regardless of case)", f.JSON)
			}
			folded := strings.ToLower(f.JSON)
			if keys[folded] {
				ps.add(file, f.Line, f.Name, "duplicate JSON key %q (keys are matched regardless of case)", f.JSON)
			}
			keys[folded] = true
			if f.Prefix || f.Filler || len(f.Values) > 0 {
				ps.add(file, f.Line, f.Name, "prefix, filler and values are header options")
			}
			if sec.Name != "request" && (f.HasDefault || f.Vary) {
				ps.add(file, f.Line, f.Name, "default= and vary= are for request fields: they are what a channel client sends")
			}
		}
		validateField(l, file, f, ps)
	}
	if sec.Declared >= 0 && end != sec.Declared {
		ps.add(file, sec.Line, "", "the %s fields end at %d but the section declares %d bytes", sec.Name, end, sec.Declared)
	}
}

func validateField(l *Layouts, file string, f *Field, ps *Problems) {
	bad := func(format string, args ...any) { ps.add(file, f.Line, f.Name, format, args...) }
	if !goIdent.MatchString(goName(f.Name)) {
		bad("name does not make a Go identifier")
	}
	if f.Map != "" && f.Kind != fixedwidth.Code {
		bad("map= is for C fields only")
	}
	if f.String && f.Kind != fixedwidth.Numeric {
		bad("string is for N fields only")
	}
	if f.HasMin && (f.Kind != fixedwidth.Numeric || f.String) {
		bad("min= is for N fields carried as integers")
	}
	if f.Prefix && f.Kind != fixedwidth.Numeric {
		bad("the length prefix must be N")
	}
	if (f.Filler || len(f.Values) > 0) && f.Kind != fixedwidth.Text {
		bad("filler and values are for X fields")
	}
	for _, v := range f.Values {
		if len(v.Value) != f.Len || !fixedwidth.Printable(v.Value) {
			bad("value %q must be %d printable characters", v.Value, f.Len)
		}
		if !goIdent.MatchString(v.Name) {
			bad("value name %q must be a Go identifier starting upper-case", v.Name)
		}
	}
	if f.Vary {
		switch {
		case f.Kind != fixedwidth.Numeric || f.String:
			bad("vary= is for N fields carried as integers")
		case f.HasMin && f.VaryMin < f.Min:
			bad("vary= starts at %d, below min=%d", f.VaryMin, f.Min)
		case f.VaryMin < 0 || len(fmt.Sprint(f.VaryMax)) > f.Len:
			bad("vary= range %d..%d does not fit %d digits", f.VaryMin, f.VaryMax, f.Len)
		}
	}
	if f.HasDefault {
		if why := badDefault(l, f); why != "" {
			bad("default=%q %s", f.Default, why)
		}
	}
	switch f.Kind {
	case fixedwidth.Numeric:
		if !f.String && f.Len > 18 {
			bad("N field of %d digits does not fit an int64; add option string", f.Len)
		}
		if f.HasMin && !f.String && f.Len <= 18 && len(strconv.FormatInt(f.Min, 10)) > f.Len {
			bad("min=%d does not fit %d digits: the field would refuse every value", f.Min, f.Len)
		}
	case fixedwidth.Timestamp:
		if f.Len != 14 {
			bad("T fields are 14 bytes (YYYYMMDDhhmmss), not %d", f.Len)
		}
	case fixedwidth.Code:
		m, ok := l.Maps[f.Map]
		switch {
		case f.Map == "":
			bad("C field without map=")
		case !ok:
			bad("code map %q does not exist", f.Map)
		default:
			for _, e := range m.Entries {
				if len(e.Wire) > f.Len {
					bad("code %q of map %s does not fit %d bytes", e.Wire, m.Name, f.Len)
				}
			}
		}
	}
}

// badDefault says why a field's default value does not fit it, or "".
func badDefault(l *Layouts, f *Field) string {
	v := f.Default
	switch f.Kind {
	case fixedwidth.Numeric:
		if !fixedwidth.Digits(v) || len(v) > f.Len {
			return fmt.Sprintf("is not at most %d digits", f.Len)
		}
		if n, err := strconv.ParseInt(v, 10, 64); !f.String && (err != nil || f.HasMin && n < f.Min) {
			return fmt.Sprintf("is below min=%d", f.Min)
		}
	case fixedwidth.Code:
		if m, ok := l.Maps[f.Map]; ok {
			for _, e := range m.Entries {
				if v == e.Wire || v == e.Core {
					return ""
				}
			}
			return "is neither a wire code nor a core id of map " + f.Map
		}
	case fixedwidth.Timestamp:
		if len(v) != 14 || !fixedwidth.Digits(v) {
			return "is not a YYYYMMDDhhmmss timestamp"
		}
	default:
		if len(v) > f.Len || !fixedwidth.Printable(v) {
			return fmt.Sprintf("is not at most %d printable characters", f.Len)
		}
	}
	return ""
}

func validateCodeMap(m *CodeMap, ps *Problems) {
	if !goIdent.MatchString(goName(m.Name)) {
		ps.add(m.File, m.Line, "", "code map name %q does not make a Go identifier", m.Name)
	}
	if len(m.Entries) == 0 {
		ps.add(m.File, m.Line, "", "code map %s has no codes", m.Name)
	}
	wires, cores := map[string]int{}, map[string]int{}
	for _, e := range m.Entries {
		if !fixedwidth.Printable(e.Wire) || !fixedwidth.Printable(e.Core) {
			ps.add(m.File, e.Line, "", "codes must be printable ASCII")
		}
		if prev, ok := wires[e.Wire]; ok {
			ps.add(m.File, e.Line, "", "wire code %q is already mapped at line %d", e.Wire, prev)
		}
		if prev, ok := cores[e.Core]; ok {
			ps.add(m.File, e.Line, "", "core id %q is already mapped at line %d: the map must work both ways", e.Core, prev)
		}
		wires[e.Wire], cores[e.Core] = e.Line, e.Line
	}
}

func validateRspMap(l *Layouts, ps *Problems) {
	file := l.RspFile
	if file == "" {
		ps.add("layouts/rspmap.csv", 0, "", "missing: the response-code table is a layout input")
		return
	}
	sources, codes := map[string]int{}, map[string]int{}
	for _, r := range l.Rsp {
		if _, ok := lookupSource(r.Source); !ok {
			ps.add(file, r.Line, "", "unknown source %q (known: %s)", r.Source, sourceNames())
		}
		if len(r.Code) != 4 || !fixedwidth.Printable(r.Code) || strings.Contains(r.Code, " ") {
			ps.add(file, r.Line, "", "response code %q for %s is not 4 characters", r.Code, r.Source)
		}
		if prev, ok := sources[r.Source]; ok {
			ps.add(file, r.Line, "", "source %s is already mapped at line %d", r.Source, prev)
		}
		if prev, ok := codes[r.Code]; ok {
			ps.add(file, r.Line, "", "code %s is already used at line %d: each source needs its own code", r.Code, prev)
		}
		sources[r.Source], codes[r.Code] = r.Line, r.Line
	}
	for _, s := range knownSources {
		if _, ok := sources[s.Name]; !ok {
			ps.add(file, 0, "", "source %s has no response code", s.Name)
		}
	}
}

func sourceNames() string {
	names := make([]string, len(knownSources))
	for i, s := range knownSources {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

// describe is the one-line form of a field used in generated comments.
func describe(f *Field) string {
	s := fmt.Sprintf("%s, %d bytes at %d, kind %c", f.Name, f.Len, f.Start, f.Kind)
	if f.Map != "" {
		s += ", code map " + f.Map
	}
	return s
}
