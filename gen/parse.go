package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"lhrelay/internal/fixedwidth"
)

// Load reads every layout file in dir and validates the whole set. It returns
// Problems (an error) listing every mistake found; nothing is generated then.
func Load(dir string) (*Layouts, error) {
	var ps Problems
	l := &Layouts{Maps: map[string]*CodeMap{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, name := range names {
		path := filepath.Join(dir, name)
		rel := filepath.ToSlash(filepath.Join(filepath.Base(dir), name))
		switch {
		case strings.HasSuffix(name, ".layout"), strings.HasSuffix(name, ".codemap"):
			data, err := os.ReadFile(path)
			if err != nil {
				return nil, err
			}
			parseLayoutFile(l, rel, data, &ps)
		case name == "rspmap.csv":
			data, err := os.ReadFile(path)
			if err != nil {
				return nil, err
			}
			l.RspFile = rel
			l.Rsp = parseRspMap(rel, data, &ps)
		}
	}
	validate(l, &ps)
	if len(ps) > 0 {
		return nil, ps
	}
	return l, nil
}

type line struct {
	no    int
	words []string
}

// splitWords splits a line into words, keeping "quoted text" as one word and
// dropping everything from an unquoted # on.
func splitWords(s string) ([]string, bool) {
	var words []string
	var cur strings.Builder
	inQuote, inWord := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inQuote && c == '"':
			inQuote = false
		case inQuote:
			cur.WriteByte(c)
		case c == '"':
			inQuote, inWord = true, true
		case c == '#':
			i = len(s)
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, !inQuote
}

func readLines(file string, data []byte, ps *Problems) []line {
	var out []line
	sc := bufio.NewScanner(bytes.NewReader(data))
	no := 0
	for sc.Scan() {
		no++
		words, ok := splitWords(sc.Text())
		if !ok {
			ps.add(file, no, "", "unterminated quote")
			continue
		}
		if len(words) > 0 {
			out = append(out, line{no, words})
		}
	}
	return out
}

func atoi(file string, no int, field, what, s string, ps *Problems) int {
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		ps.add(file, no, field, "%s %q is not a whole number", what, s)
		return -1
	}
	return v
}

// parseLayoutFile reads a header, transaction or code map file; its first
// directive says which.
func parseLayoutFile(l *Layouts, file string, data []byte, ps *Problems) {
	lines := readLines(file, data, ps)
	if len(lines) == 0 {
		ps.add(file, 0, "", "empty layout file")
		return
	}
	first := lines[0]
	switch first.words[0] {
	case "header":
		parseHeader(l, file, lines, ps)
	case "transaction":
		parseTransaction(l, file, lines, ps)
	case "codemap":
		parseCodeMap(l, file, lines, ps)
	default:
		ps.add(file, first.no, "", "the file must start with header, transaction or codemap, not %q", first.words[0])
	}
}

func parseHeader(l *Layouts, file string, lines []line, ps *Problems) {
	first := lines[0]
	if len(first.words) != 3 {
		ps.add(file, first.no, "", "want: header NAME LENGTH")
		return
	}
	if l.Header != nil {
		ps.add(file, first.no, "", "a second header layout (the first is in %s)", l.Header.File)
		return
	}
	h := &Header{File: file, Name: first.words[1]}
	h.Section = Section{Name: "header", Declared: atoi(file, first.no, "", "header length", first.words[2], ps), Line: first.no, present: true}
	for _, ln := range lines[1:] {
		if !isFieldName(ln.words[0]) {
			ps.add(file, ln.no, "", "unknown directive %q in a header layout", ln.words[0])
			continue
		}
		if f := parseField(file, ln, false, ps); f != nil {
			h.Fields = append(h.Fields, f)
		}
	}
	l.Header, l.HeaderAt = h, file
}

func parseTransaction(l *Layouts, file string, lines []line, ps *Problems) {
	first := lines[0]
	if len(first.words) != 3 {
		ps.add(file, first.no, "", `want: transaction CODE "title"`)
		return
	}
	tx := &Transaction{File: file, Line: first.no, Code: first.words[1], Title: first.words[2]}
	var cur *Section
	for _, ln := range lines[1:] {
		w := ln.words
		switch {
		case isFieldName(w[0]):
			if cur == nil {
				ps.add(file, ln.no, w[0], "field row before a request or response heading")
				continue
			}
			if f := parseField(file, ln, true, ps); f != nil {
				cur.Fields = append(cur.Fields, f)
			}
		case w[0] == "core":
			if len(w) != 3 {
				ps.add(file, ln.no, "", "want: core METHOD PATH")
				continue
			}
			tx.Method, tx.Path = w[1], w[2]
		case w[0] == "body":
			if len(w) != 2 {
				ps.add(file, ln.no, "", "want: body json|none")
				continue
			}
			tx.Body = w[1]
		case w[0] == "lookup":
			if tx.Lookup.Line != 0 {
				ps.add(file, ln.no, "", "a second lookup directive (the first is at line %d)", tx.Lookup.Line)
				continue
			}
			switch {
			case len(w) == 2 && w[1] == "none":
				tx.Lookup = Lookup{None: true, Line: ln.no}
			case len(w) == 3:
				tx.Lookup = Lookup{Method: w[1], Path: w[2], Line: ln.no}
			default:
				ps.add(file, ln.no, "", "want: lookup GET PATH, or lookup none")
			}
		case w[0] == "client":
			if len(w) != 2 || w[1] != "default" {
				ps.add(file, ln.no, "", "want: client default")
				continue
			}
			tx.ClientDefault, tx.ClientDefaultLine = true, ln.no
		case w[0] == "status":
			if len(w) != 3 {
				ps.add(file, ln.no, "", "want: status HTTP_STATUS SOURCE")
				continue
			}
			tx.Status = append(tx.Status, StatusRule{Status: atoi(file, ln.no, "", "HTTP status", w[1], ps), Source: w[2], Line: ln.no})
		case w[0] == "request" || w[0] == "response":
			sec := &tx.Request
			if w[0] == "response" {
				sec = &tx.Response
			}
			if sec.present {
				ps.add(file, ln.no, "", "a second %s section (the first is at line %d)", w[0], sec.Line)
				continue
			}
			if len(w) != 2 {
				ps.add(file, ln.no, "", "want: %s LENGTH", w[0])
				continue
			}
			*sec = Section{Name: w[0], Declared: atoi(file, ln.no, "", w[0]+" length", w[1], ps), Line: ln.no, present: true}
			cur = sec
		default:
			ps.add(file, ln.no, "", "unknown directive %q", w[0])
		}
	}
	l.Txs = append(l.Txs, tx)
}

func parseCodeMap(l *Layouts, file string, lines []line, ps *Problems) {
	first := lines[0]
	if len(first.words) != 3 {
		ps.add(file, first.no, "", `want: codemap NAME "title"`)
		return
	}
	m := &CodeMap{File: file, Line: first.no, Name: first.words[1], Title: first.words[2]}
	for _, ln := range lines[1:] {
		if len(ln.words) != 2 {
			ps.add(file, ln.no, "", "want: WIRE_CODE CORE_ID")
			continue
		}
		m.Entries = append(m.Entries, CodeEntry{Wire: ln.words[0], Core: ln.words[1], Line: ln.no})
	}
	if prev, ok := l.Maps[m.Name]; ok {
		ps.add(file, first.no, "", "code map %s is already defined in %s", m.Name, prev.File)
		return
	}
	l.Maps[m.Name] = m
}

func isFieldName(s string) bool {
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// parseField reads "NAME START LEN KIND [JSON] [options…]".
func parseField(file string, ln line, withJSON bool, ps *Problems) *Field {
	w := ln.words
	min := 4
	if withJSON {
		min = 5
	}
	if len(w) < min {
		if withJSON {
			ps.add(file, ln.no, w[0], "want: NAME START LEN KIND JSON_KEY [options]")
		} else {
			ps.add(file, ln.no, w[0], "want: NAME START LEN KIND [options]")
		}
		return nil
	}
	f := &Field{Name: w[0], Line: ln.no}
	f.Start = atoi(file, ln.no, f.Name, "start", w[1], ps)
	f.Len = atoi(file, ln.no, f.Name, "length", w[2], ps)
	if len(w[3]) != 1 || !strings.Contains("NXCTH", w[3]) {
		ps.add(file, ln.no, f.Name, "unknown kind %q (want N, X, C, T or H)", w[3])
		return nil
	}
	f.Kind = fixedwidth.Kind(w[3][0])
	opts := w[4:]
	if withJSON {
		f.JSON, opts = w[4], w[5:]
	}
	for _, o := range opts {
		key, val, hasVal := strings.Cut(o, "=")
		switch {
		case key == "map" && hasVal:
			f.Map = val
		case key == "min" && hasVal:
			v, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				ps.add(file, ln.no, f.Name, "min=%q is not an integer", val)
			}
			f.Min, f.HasMin = v, true
		case key == "default" && hasVal:
			f.Default, f.HasDefault = val, true
		case key == "vary" && hasVal:
			lo, hi, ok := strings.Cut(val, "..")
			a, errA := strconv.ParseInt(lo, 10, 64)
			b, errB := strconv.ParseInt(hi, 10, 64)
			if !ok || errA != nil || errB != nil || a > b {
				ps.add(file, ln.no, f.Name, "vary=%q: want MIN..MAX, two integers with MIN <= MAX", val)
			}
			f.VaryMin, f.VaryMax, f.Vary = a, b, true
		case key == "values" && hasVal:
			for _, pair := range strings.Split(val, ",") {
				v, name, ok := strings.Cut(pair, ":")
				if !ok || v == "" || name == "" {
					ps.add(file, ln.no, f.Name, "values wants VALUE:Name pairs, got %q", pair)
					continue
				}
				f.Values = append(f.Values, EnumValue{Value: v, Name: name})
			}
		case o == "string":
			f.String = true
		case o == "account":
			f.Account = true
		case o == "prefix":
			f.Prefix = true
		case o == "filler":
			f.Filler = true
		default:
			ps.add(file, ln.no, f.Name, "unknown option %q", o)
		}
	}
	return f
}

func parseRspMap(file string, data []byte, ps *Problems) []RspRow {
	r := csv.NewReader(bytes.NewReader(data))
	r.FieldsPerRecord = -1
	var rows []RspRow
	for no := 1; ; no++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			ps.add(file, no, "", "%v", err)
			break
		}
		if no == 1 {
			if strings.Join(rec, ",") != "source,rsp_code" {
				ps.add(file, no, "", "the header must be source,rsp_code, got %q", strings.Join(rec, ","))
			}
			continue
		}
		if len(rec) != 2 {
			ps.add(file, no, "", "want 2 columns (source,rsp_code), got %d", len(rec))
			continue
		}
		rows = append(rows, RspRow{Source: rec[0], Code: rec[1], Line: no})
	}
	return rows
}
