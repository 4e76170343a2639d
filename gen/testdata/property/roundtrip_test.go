// Package proptest is the round-trip program of gen's TestGeneratedProperty.
// That test generates synthetic layouts into a temporary module, copies this
// file there as internal/proptest, and writes testdata/cases.json: values
// its own oracle chose and encoded for every synthetic transaction, valid
// ones that must travel unchanged and invalid ones that must be refused,
// each with the field the refusal must name. Everything here goes through
// the generated registry and the relay's own parse (wire.ParseRequest) and
// core-call gate (corecall.Prepare), never a transaction by name.
package proptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/corecall"
	"lhrelay/internal/fixedwidth"
	"lhrelay/internal/generated"
	"lhrelay/internal/wire"
)

// The cases, as gen/property_test.go writes them (the same types).
type propCases struct {
	GUID string
	Txs  []propTx
}

type propTx struct {
	Code     string
	Method   string
	JSONBody bool
	Lookup   bool // lookup GET …; else lookup none
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
	Request  bool   // a request body; else a response body
	Body     string // the fixed-width body
	JSON     []propPair
	JSONText string // the same JSON as the oracle writes it (a response's with keys the layout does not have)
	CorePath string
	Lookup   string // the lookup path; "" with lookup none
}

type propPair struct {
	Key, Value string // an integer's value is its decimal digits
	Int        bool
}

type propInvalid struct {
	Request bool
	// Stage is where the refusal must come: "decode" (the fixed-width body),
	// "path" (a decoded body whose value cannot fill its path segment),
	// "set" (Set(Key, Value) on a valid body, then the path), "json" (the
	// core's JSON JSONText, refused when read or when encoded).
	Stage     string
	Body      string
	Key       string
	Value     string
	JSONText  string
	Field     string // the layout field the error must name
	InLookup  bool   // path, set: the field fills a segment of the lookup path
	Printable bool   // decode: the body is printable, so the relay's parse names the field
	MapError  bool   // json: a code missing from its map, refused when read (names the JSON key)
	Why       string
}

func load(t *testing.T) propCases {
	t.Helper()
	data, err := os.ReadFile("testdata/cases.json")
	assert.NilError(t, err)
	var c propCases
	assert.NilError(t, json.Unmarshal(data, &c))
	assert.Assert(t, len(c.Txs) > 0)
	return c
}

func TestSynthetic(t *testing.T) {
	c := load(t)
	for _, pt := range c.Txs {
		t.Run(pt.Code, func(t *testing.T) {
			tx, ok := generated.LookupTransaction(pt.Code)
			assert.Assert(t, ok, "%s is registered", pt.Code)
			assert.Equal(t, tx.Method, pt.Method)
			assert.Equal(t, tx.JSONBody, pt.JSONBody)
			assert.Equal(t, tx.Settle == generated.SettleByLookup, pt.Lookup)
			checkSpecs(t, tx, pt.Fields)
			for i, v := range pt.Valid {
				if v.Request {
					validRequest(t, tx, c.GUID, pt, v, i)
				} else {
					validResponse(t, tx, c.GUID, v, i)
				}
			}
			for _, inv := range pt.Invalid {
				invalid(t, tx, c.GUID, inv)
			}
		})
	}
}

// checkSpecs: the registry describes the request fields as the layout
// does, and each default is a value the field takes.
func checkSpecs(t *testing.T, tx *generated.Transaction, want []propSpec) {
	assert.Equal(t, len(tx.RequestFields), len(want))
	for i, fs := range tx.RequestFields {
		w := want[i]
		assert.DeepEqual(t, propSpec{fs.Name, fs.JSON, fs.Kind, fs.Offset, fs.Len, fs.Default, fs.HasDefault}, w)
		if fs.HasDefault {
			assert.NilError(t, tx.NewRequest().Set(fs.JSON, fs.Default), fs.Name)
		}
	}
}

// frame is a request frame of tx carrying body as it is.
func frame(t *testing.T, tx *generated.Transaction, guid, body string) []byte {
	t.Helper()
	h := generated.Header{
		Len: generated.HeaderLen - generated.PrefixLen + len(body), TxCode: tx.Code, GUID: guid, Flag: generated.FlagRequest,
		SrcOrg: generated.DefaultSrcOrg, DstOrg: generated.DefaultDstOrg, SentAt: "20261201093000",
	}
	out, err := h.AppendTo(nil)
	assert.NilError(t, err)
	return append(out, body...)
}

// pairs reads a JSON object's members in order: an integer as its digits.
func pairs(t *testing.T, data []byte) []propPair {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	tok, err := d.Token()
	assert.NilError(t, err, "%s", data)
	assert.Equal(t, tok, json.Delim('{'), "%s", data)
	out := []propPair{}
	for d.More() {
		k, err := d.Token()
		assert.NilError(t, err, "%s", data)
		v, err := d.Token()
		assert.NilError(t, err, "%s", data)
		switch v := v.(type) {
		case json.Number:
			out = append(out, propPair{Key: k.(string), Value: v.String(), Int: true})
		case string:
			out = append(out, propPair{Key: k.(string), Value: v})
		default:
			t.Fatalf("%s: key %v holds %v", data, k, v)
		}
	}
	_, err = d.Token()
	assert.NilError(t, err)
	_, err = d.Token()
	assert.Equal(t, err, io.EOF, "%s: one object", data)
	return out
}

func validRequest(t *testing.T, tx *generated.Transaction, guid string, pt propTx, v propValid, i int) {
	// The relay's way in: the frame parses and the core call is prepared.
	r, err := wire.ParseRequest(frame(t, tx, guid, v.Body))
	assert.NilError(t, err, "valid request %d %q", i, v.Body)
	_, err = corecall.Prepare(tx, guid, r.Body)
	assert.NilError(t, err, "valid request %d %q", i, v.Body)
	req := r.Body

	out, err := req.AppendTo(nil)
	assert.NilError(t, err)
	assert.Equal(t, string(out), v.Body, "fixed width → decode → encode")
	path, err := req.CorePath()
	assert.NilError(t, err)
	assert.Equal(t, path, v.CorePath)
	lookup, err := req.LookupPath(guid)
	if pt.Lookup {
		assert.NilError(t, err)
		assert.Equal(t, lookup, v.Lookup)
	} else {
		assert.Assert(t, errors.Is(err, generated.ErrNoLookup), "lookup none: %v", err)
	}
	js, err := req.CoreJSON(guid)
	assert.NilError(t, err)
	assert.DeepEqual(t, pairs(t, js), v.JSON)
	appended, err := req.AppendCoreJSON([]byte("x"), guid)
	assert.NilError(t, err)
	assert.Equal(t, string(appended), "x"+string(js))

	for _, text := range []string{v.JSONText, string(js)} {
		back := tx.NewRequest()
		g, err := back.FromCoreJSON([]byte(text))
		assert.NilError(t, err, text)
		assert.Equal(t, g, guid)
		out, err := back.AppendTo(nil)
		assert.NilError(t, err, text)
		assert.Equal(t, string(out), v.Body, "JSON → encode: %s", text)
	}

	// A channel client's way: every field set from its text form.
	set := tx.NewRequest()
	for _, p := range v.JSON[1:] {
		assert.NilError(t, set.Set(p.Key, p.Value))
	}
	out, err = set.AppendTo(nil)
	assert.NilError(t, err)
	assert.Equal(t, string(out), v.Body, "Set → encode")

	fields := req.AppendFields(nil)
	assert.Equal(t, len(fields), len(v.JSON)-1)
	for k, f := range req.Fields() {
		assert.Equal(t, f.JSON, v.JSON[k+1].Key)
		assert.Equal(t, f.Integer, v.JSON[k+1].Int)
		assert.Equal(t, fields[k].JSON, f.JSON)
	}
}

func validResponse(t *testing.T, tx *generated.Transaction, guid string, v propValid, i int) {
	rsp := tx.NewResponse()
	assert.NilError(t, rsp.Decode(v.Body), "valid response %d %q", i, v.Body)
	out, err := rsp.AppendTo(nil)
	assert.NilError(t, err)
	assert.Equal(t, string(out), v.Body, "fixed width → decode → encode")
	js, err := rsp.CoreJSON()
	assert.NilError(t, err)
	assert.DeepEqual(t, pairs(t, js), v.JSON)
	for _, text := range []string{v.JSONText, string(js)} {
		back := tx.NewResponse()
		assert.NilError(t, back.FromCoreJSON([]byte(text)), text)
		out, err := back.AppendTo(nil)
		assert.NilError(t, err, text)
		assert.Equal(t, string(out), v.Body, "JSON → encode: %s", text)

		// The relay's answer to a 200: the frame's body is this body.
		req := generated.Header{TxCode: tx.Code, GUID: guid, Flag: generated.FlagRequest, SrcOrg: "081", DstOrg: "999", SentAt: "20261201093000"}
		answer, err := wire.AppendResponse(nil, &req, generated.RspHTTP200, back, time.Now())
		assert.NilError(t, err)
		assert.Equal(t, string(answer[generated.HeaderLen:]), v.Body)
	}
}

// names checks that err is the field's own error: a FieldError of that
// layout and field, or with mapError the JSON reader's refusal, which names
// the layout and the JSON key.
func names(t *testing.T, err error, layout string, inv propInvalid, what string) {
	t.Helper()
	assert.Assert(t, err != nil, "%s: %s must be refused (%s)", what, inv.Field, inv.Why)
	if inv.MapError {
		assert.Assert(t, is.Contains(err.Error(), layout), what)
		assert.Assert(t, is.Contains(err.Error(), inv.Key+":"), what)
		return
	}
	var fe *fixedwidth.FieldError
	assert.Assert(t, errors.As(err, &fe), "%s: %v is no FieldError (%s)", what, err, inv.Why)
	assert.Equal(t, fe.Layout, layout, "%s: %v", what, err)
	assert.Equal(t, fe.Field, inv.Field, "%s: %v (%s)", what, err, inv.Why)
}

func invalid(t *testing.T, tx *generated.Transaction, guid string, inv propInvalid) {
	layout := tx.Code + " response"
	if inv.Request {
		layout = tx.Code + " request"
	}
	what := inv.Stage + " " + inv.Why
	switch {
	case inv.Stage == "decode" && inv.Request:
		// The relay answers a frame ParseRequest refuses with its source
		// and calls nothing.
		_, err := wire.ParseRequest(frame(t, tx, guid, inv.Body))
		var re *wire.RefusedError
		assert.Assert(t, errors.As(err, &re), "%s: %q parses: %v", what, inv.Body, err)
		assert.Equal(t, re.Source, generated.SourceBadFrame)
		if inv.Printable {
			names(t, err, layout, inv, what)
		}
		names(t, tx.NewRequest().Decode(inv.Body), layout, inv, what)
	case inv.Stage == "decode":
		names(t, tx.NewResponse().Decode(inv.Body), layout, inv, what)
	case inv.Stage == "path" || inv.Stage == "set":
		r, err := wire.ParseRequest(frame(t, tx, guid, inv.Body))
		assert.NilError(t, err, what)
		if inv.Stage == "set" {
			assert.NilError(t, r.Body.Set(inv.Key, inv.Value), what)
		}
		// corecall.Prepare is what the relay calls before the core
		// (internal/relay/frame.go): refused, it answers E102, never sent.
		_, err = corecall.Prepare(tx, guid, r.Body)
		names(t, err, layout, inv, what+": corecall.Prepare")
		_, err = r.Body.CorePath()
		names(t, err, layout, inv, what+": CorePath")
		if inv.InLookup {
			_, err = r.Body.LookupPath(guid)
			names(t, err, layout, inv, what+": LookupPath")
		}
	case inv.Stage == "json" && inv.Request:
		back := tx.NewRequest()
		_, err := back.FromCoreJSON([]byte(inv.JSONText))
		if err == nil {
			_, err = back.AppendTo(nil)
		}
		names(t, err, layout, inv, what+": "+inv.JSONText)
	case inv.Stage == "json":
		back := tx.NewResponse()
		err := back.FromCoreJSON([]byte(inv.JSONText))
		if err == nil {
			_, err = back.AppendTo(nil)
		}
		names(t, err, layout, inv, what+": "+inv.JSONText)
	default:
		t.Fatalf("unknown stage %q", inv.Stage)
	}
}
