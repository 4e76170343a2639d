package main

import (
	"fmt"
	"sort"
	"strings"

	"lhrelay/internal/fixedwidth"
)

// Field is one row of a layout section.
type Field struct {
	Name   string // as in the layout, e.g. WD_ACCT
	Start  int    // offset within the section (the header counts the length prefix)
	Len    int
	Kind   fixedwidth.Kind
	JSON   string // key in the core's JSON; empty in the header
	Map    string // code map of a C field
	String bool   // N carried as a digit string (keeps leading zeros)
	Min    int64  // smallest allowed value of an int64 N field
	HasMin bool
	// Account marks an account number: masked in logs at info level.
	Account bool
	// Default is the value a channel client sends when it is given none
	// (option default=); HasDefault tells an empty default from none.
	Default    string
	HasDefault bool
	// VaryMin..VaryMax (option vary=MIN..MAX, integer N fields only) is
	// the range a load client draws each frame's value from, so that
	// frames of one run differ.
	VaryMin, VaryMax int64
	Vary             bool
	Prefix           bool        // the header's length prefix
	Filler           bool        // spaces, not carried in the struct
	Values           []EnumValue // the only values an X field may hold
	Line             int
}

// EnumValue is one allowed value of a field with values=.
type EnumValue struct {
	Value string
	Name  string // Go name suffix, e.g. Request for FlagRequest
}

// End is the exclusive end offset of the field.
func (f *Field) End() int { return f.Start + f.Len }

// Section is the header, a request body or a response body.
type Section struct {
	Name     string // "request", "response" or "header"
	Declared int    // the length its heading declares
	Fields   []*Field
	Line     int
	present  bool
}

// Header is the frame header layout.
type Header struct {
	File string
	Name string
	Section
}

// StatusRule maps a core HTTP status to a response-code source for one transaction.
type StatusRule struct {
	Status int
	Source string
	Line   int
}

// Lookup is a transaction's lookup directive: how an unknown outcome is
// settled (SPEC §2). Either a GET the core answers 200 (posted) or 404
// (never posted), or None for a read, settled without asking.
type Lookup struct {
	Method string // always GET once validated
	Path   string // {guid} is the header GUID, any other {key} a request JSON key
	None   bool
	Line   int // 0: no lookup directive
}

// Transaction is one transaction layout file.
type Transaction struct {
	File   string
	Line   int // of the transaction directive
	Code   string
	Title  string
	Method string
	Path   string
	Body   string // "json" or "none"
	Status []StatusRule
	Lookup Lookup
	// ClientDefault: the transaction a channel client sends when none is
	// named (directive client default); at most one transaction says so.
	ClientDefault     bool
	ClientDefaultLine int
	Request           Section
	Response          Section
}

// CodeMap translates wire codes to the core's ids.
type CodeMap struct {
	File    string
	Line    int
	Name    string
	Title   string
	Entries []CodeEntry
}

// CodeEntry is one wire code and its core id.
type CodeEntry struct {
	Wire, Core string
	Line       int
}

// RspRow is one row of rspmap.csv.
type RspRow struct {
	Source, Code string
	Line         int
}

// Layouts is everything read from the layouts folder.
type Layouts struct {
	Header   *Header
	HeaderAt string
	Txs      []*Transaction
	Maps     map[string]*CodeMap
	Rsp      []RspRow
	RspFile  string
}

// Problem is one thing wrong with a layout file; the generator collects them
// all before writing anything, so an analyst sees every mistake at once.
type Problem struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (p Problem) String() string {
	s := p.File
	if p.Line > 0 {
		s += fmt.Sprintf(":%d", p.Line)
	}
	if p.Field != "" {
		s += ": field " + p.Field
	}
	return s + ": " + p.Msg
}

// Problems is a list of layout problems; it is an error when non-empty.
type Problems []Problem

func (ps Problems) Error() string {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].File != ps[j].File {
			return ps[i].File < ps[j].File
		}
		return ps[i].Line < ps[j].Line
	})
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

func (ps *Problems) add(file string, line int, field, format string, args ...any) {
	*ps = append(*ps, Problem{File: file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// sourceInfo is one outcome the relay can produce. The relay's code names
// these sources, so they are the generator's fixed vocabulary; rspmap.csv
// only chooses the code each one is answered with.
type sourceInfo struct {
	Name        string
	Meaning     string
	LedgerState string // state the ledger records; empty when nothing is recorded
	CoreResult  bool   // a "result" value of the core's 422 answer
	// FromStatus: a core HTTP status may mean this source (layouts'
	// status lines). A status proves the core saw the request, so neither
	// CONNECT_FAIL nor the relay's own verdicts (E101–E904) can be one.
	FromStatus bool
}

var knownSources = []sourceInfo{
	{"HTTP200", "posted; the body carries the result", "DONE", false, false},
	{"INSUFFICIENT_FUNDS", "rejected by the core: insufficient funds", "DONE", true, true},
	{"NO_ACCOUNT", "rejected by the core: no such account", "DONE", true, true},
	{"LIMIT_EXCEEDED", "rejected by the core: over the transfer limit", "DONE", true, true},
	{"HTTP500", "core error, not posted", "DONE", false, true},
	{"READ_TIMEOUT", "sent, result unknown: never resend, inquire", "UNKNOWN", false, true},
	{"CONNECT_FAIL", "definitely not sent: safe to resend with the same GUID", "FAILED", false, false},
	{"UNKNOWN_TX", "TX_CODE not registered", "", false, false},
	{"BAD_FRAME", "malformed frame or field", "", false, false},
	{"IN_PROGRESS", "the same GUID is being processed right now", "", false, false},
	{"GUID_REUSED", "the GUID is known with a different request", "", false, false},
}

func lookupSource(name string) (sourceInfo, bool) {
	for _, s := range knownSources {
		if s.Name == name {
			return s, true
		}
	}
	return sourceInfo{}, false
}

// headerFields are the header fields the relay's code reads by name; a header
// layout without them would generate code the relay cannot use.
var headerFields = []string{"LEN", "TX_CODE", "GUID", "FLAG", "SRC_ORG", "DST_ORG", "RSP_CODE", "SENT_AT"}

// goName turns a layout name (WD_ACCT, wdAcct) into an exported Go name
// (WdAcct), keeping the initialisms Go style expects.
func goName(s string) string {
	initialisms := map[string]string{"GUID": "GUID", "ID": "ID", "URL": "URL", "HTTP": "HTTP", "JSON": "JSON"}
	var out strings.Builder
	for _, part := range strings.Split(s, "_") {
		if part == "" {
			continue
		}
		letters := strings.TrimRight(part, "0123456789")
		if v, ok := initialisms[strings.ToUpper(letters)]; ok {
			out.WriteString(v + part[len(letters):]) // HTTP200 stays HTTP200
			continue
		}
		out.WriteString(strings.ToUpper(part[:1]) + strings.ToLower(part[1:]))
	}
	return out.String()
}
