package channel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
)

// JSON keys of a request object that are not body fields.
const (
	JSONKeyTx   = "tx"
	JSONKeyGUID = "guid"
)

// ReadJSONRequests reads a stream of JSON request objects (one or more,
// separated by white space, e.g. one per line). Each object holds the
// layout's JSON keys with string or number values, plus optional "tx" and
// "guid" strings. Missing tx and guid stay empty in the result: the caller
// picks the defaults.
func ReadJSONRequests(r io.Reader) ([]Request, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var reqs []Request
	for n := 1; ; n++ {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("JSON request %d: %w", n, err)
		}
		if obj == nil {
			return nil, fmt.Errorf("JSON request %d: want an object, got null", n)
		}
		req, err := requestFromJSON(obj)
		if err != nil {
			return nil, fmt.Errorf("JSON request %d: %w", n, err)
		}
		reqs = append(reqs, req)
	}
	if len(reqs) == 0 {
		return nil, errors.New("no JSON request object on input")
	}
	return reqs, nil
}

// ParseJSONRequest reads exactly one JSON request object (see
// ReadJSONRequests).
func ParseJSONRequest(data []byte) (Request, error) {
	reqs, err := ReadJSONRequests(bytes.NewReader(data))
	if err != nil {
		return Request{}, err
	}
	if len(reqs) != 1 {
		return Request{}, fmt.Errorf("want one JSON request object, got %d", len(reqs))
	}
	return reqs[0], nil
}

func requestFromJSON(obj map[string]any) (Request, error) {
	var req Request
	req.Fields = make(map[string]string, len(obj))
	for _, key := range slices.Sorted(maps.Keys(obj)) {
		v := obj[key]
		switch key {
		case JSONKeyTx, JSONKeyGUID:
			s, ok := v.(string)
			if !ok {
				return req, fmt.Errorf("key %q: want a string, got %s", key, jsonType(v))
			}
			if key == JSONKeyTx {
				req.Tx = s
			} else {
				req.GUID = s
			}
			continue
		}
		switch v := v.(type) {
		case string:
			req.Fields[key] = v
		case json.Number:
			req.Fields[key] = v.String()
		default:
			return req, fmt.Errorf("key %q: want a string or a number, got %s", key, jsonType(v))
		}
	}
	return req, nil
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	}
	return fmt.Sprintf("%T", v)
}
