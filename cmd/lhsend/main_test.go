package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/channel"
	"lhrelay/internal/generated"
	"lhrelay/internal/testkit"
)

const guid = "0123456789abcdef0123456789abcdef"

type result struct {
	code           int
	stdout, stderr string
}

func runCmd(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errOut strings.Builder
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

// oneLineError asserts a failure with exit status code and exactly one line
// on stderr containing each of want.
func oneLineError(t *testing.T, r result, code int, want ...string) {
	t.Helper()
	assert.Equal(t, r.code, code, "stdout %q stderr %q", r.stdout, r.stderr)
	assert.Assert(t, strings.HasPrefix(r.stderr, "lhsend: "), r.stderr)
	assert.Equal(t, strings.Count(r.stderr, "\n"), 1, r.stderr)
	for _, w := range want {
		assert.Assert(t, is.Contains(r.stderr, w))
	}
}

func squeeze(s string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}

func TestSingleRequestFromFlags(t *testing.T) {
	r := testkit.Start(t, nil)
	res := runCmd(t, "", "--addr", r.Addr, "--guid", guid, "--wd-bank", "081", "--wd-acct", "11002003004005",
		"--dp-bank", "KBK", "--dp-acct", "12345678901", "--amount", "50000", "--memo", "rent")
	assert.Equal(t, res.code, 0, res.stderr)
	assert.Equal(t, res.stderr, "")

	frames := r.Frames()
	assert.Equal(t, len(frames), 1)
	f := string(frames[0])
	// By hand from SPEC §1–§2: prefix, header, body.
	assert.Equal(t, f[:69], "0143"+"BKTR0001"+guid+"S"+"081"+"999"+"    "+f[55:69])
	assert.Equal(t, f[69:80], "           ")
	assert.Equal(t, f[80:], "081"+"11002003004005"+"004"+"00012345678901"+"0000000050000"+"rent                ")
	sent, err := time.ParseInLocation("20060102150405", f[55:69], time.Local)
	assert.NilError(t, err)
	assert.Assert(t, time.Since(sent) < time.Minute)

	out := squeeze(res.stdout)
	for _, want := range []string{
		"request BKTR0001 " + guid + " 081 → 999 147 bytes",
		"WD_ACCT 11002003004005", "DP_BANK 004", "AMOUNT 50000", "MEMO rent",
		"answer 125 bytes in",
		"FLAG R", "SRC_ORG 999", "DST_ORG 081",
		"RSP_CODE 0000 posted; the body carries the result",
		"CORE_TXID 1", "BALANCE 1",
	} {
		assert.Assert(t, is.Contains(out, want))
	}
}

func TestSingleRequestDefaultsAndJSON(t *testing.T) {
	r := testkit.Start(t, nil)
	res := runCmd(t, "", "--addr", r.Addr, "--json", "--tx", "BKIQ0001")
	assert.Equal(t, res.code, 0, res.stderr)
	var j struct {
		Request map[string]any `json:"request"`
		Answer  map[string]any `json:"answer"`
		Latency float64        `json:"latencyMs"`
		Sent    string         `json:"sentFrame"`
		Frame   string         `json:"answerFrame"`
	}
	assert.NilError(t, json.Unmarshal([]byte(res.stdout), &j))
	assert.Equal(t, j.Request["bank"], "LHB")
	assert.Equal(t, j.Request["acct"], "11002003004007")
	g := j.Request["guid"].(string)
	assert.Assert(t, channel.ValidGUID(g), g)
	assert.Equal(t, j.Answer["guid"], g)
	assert.Equal(t, j.Answer["rspCode"], "0000")
	assert.Equal(t, j.Answer["meaning"], "posted; the body carries the result")
	assert.Equal(t, j.Answer["body"].(map[string]any)["balance"], 1.0)
	assert.Equal(t, j.Sent, string(r.Frames()[0]))
	assert.Equal(t, len(j.Frame), generated.HeaderLen+generated.BKIQ0001ResponseLen)
}

func TestRequestsFromStdin(t *testing.T) {
	r := testkit.Start(t, nil)
	in := `{"guid":"` + guid + `","amount":7,"memo":"from json"}
	       {"tx":"BKIQ0001","acct":"12345"}`
	// "-" reads stdin; flags after it still count and override the JSON.
	res := runCmd(t, in, "--addr", r.Addr, "-", "--memo", "flag wins", "--json")
	assert.Equal(t, res.code, 0, res.stderr)
	frames := r.Frames()
	assert.Equal(t, len(frames), 2)
	assert.Equal(t, len(strings.Split(strings.TrimSpace(res.stdout), "\n")), 2)

	h, body, err := channel.DecodeRequest(frames[0])
	assert.NilError(t, err)
	assert.Equal(t, h.GUID, guid)
	tr := body.(*generated.BKTR0001Request)
	assert.Equal(t, tr.Amount, int64(7))
	assert.Equal(t, tr.Memo, "flag wins")
	assert.Equal(t, tr.WdAcct, "11002003004007")

	h, body, err = channel.DecodeRequest(frames[1])
	assert.NilError(t, err)
	assert.Equal(t, h.TxCode, "BKIQ0001")
	assert.Assert(t, h.GUID != guid)
	assert.Equal(t, body.(*generated.BKIQ0001Request).Acct, "00000000012345")
}

func TestStdinMemoFlagNotForInquiry(t *testing.T) {
	r := testkit.Start(t, nil)
	res := runCmd(t, `{"tx":"BKIQ0001"}`, "--addr", r.Addr, "--stdin", "--memo", "x")
	oneLineError(t, res, exitUsage, "--memo is not a field of BKIQ0001 (its fields: --bank, --acct)")
	assert.Equal(t, len(r.Frames()), 0)
}

func TestInputValidation(t *testing.T) {
	r := testkit.Start(t, nil)
	cases := []struct {
		name  string
		stdin string
		args  []string
		want  []string
	}{
		{"unknown tx", "", []string{"--tx", "BKXX0001"}, []string{`unknown transaction "BKXX0001"`, "(registered: " + strings.Join(channel.TxCodes(), ", ") + ")"}},
		{"unknown flag", "", []string{"--colour", "red"}, []string{"flag provided but not defined: -colour"}},
		{"field of another tx", "", []string{"--bank", "LHB"}, []string{"--bank is not a field of BKTR0001", "--wd-bank"}},
		{"unknown json key", `{"colour":"red"}`, []string{"-"}, []string{`no request field with JSON key "colour"`}},
		{"amount not integer", "", []string{"--amount", "12.5"}, []string{`amount: "12.5" is not an integer`}},
		{"amount json float", `{"amount":1e3}`, []string{"--stdin"}, []string{`amount: "1e3" is not an integer`}},
		{"account with letters", "", []string{"--wd-acct", "1100200300400A"}, []string{"wdAcct:", "WD_ACCT", "not 1 to 14 digits"}},
		{"bad guid", "", []string{"--guid", "XYZ"}, []string{`guid "XYZ": want 32 lowercase hex digits`}},
		{"bad json guid", `{"guid":"0123"}`, []string{"-"}, []string{`guid "0123"`}},
		{"code not in map", "", []string{"--dp-bank", "777"}, []string{"dpBank:", "not a code of map BANK", `"777"`}},
		{"bad json", `{"amount":`, []string{"-"}, []string{"stdin: JSON request 1"}},
		{"unexpected argument", "", []string{"extra"}, []string{`unexpected argument "extra"`}},
		{"raw with count", "", []string{"--raw", "3030", "--count", "2"}, []string{"--raw/--raw-file send bytes as they are"}},
		{"raw bad hex", "", []string{"--raw", "30 3x"}, []string{`'x' (character 5) is not a hex digit`}},
		{"raw missing file", "", []string{"--raw-file", "/nonexistent/x"}, []string{"no such file"}},
		{"rate without count", "", []string{"--rate", "5"}, []string{"--rate is for load runs: give --count too"}},
		{"count zero", "", []string{"--count", "0"}, []string{"--count 0: want at least 1"}},
		{"guid with count", "", []string{"--count", "2", "--guid", guid}, []string{"--guid with --count"}},
		{"duplicates out of range", "", []string{"--count", "2", "--duplicates", "150"}, []string{"duplicates 150"}},
		{"bad timeout", "", []string{"--answer-timeout", "-1"}, []string{"negative duration"}},
		{"load template guid", `{"guid":"` + guid + `"}`, []string{"-", "--count", "2"}, []string{`no "guid" in the JSON template`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := runCmd(t, tc.stdin, append([]string{"--addr", r.Addr}, tc.args...)...)
			oneLineError(t, res, exitUsage, tc.want...)
			assert.Equal(t, res.stdout, "")
		})
	}
	assert.Equal(t, len(r.Frames()), 0, "nothing is sent for bad input")
}

func TestUnreachable(t *testing.T) {
	addr := testkit.ClosedAddr(t)
	for _, args := range [][]string{
		{"--addr", addr},
		{"--addr", addr, "--count", "3", "--concurrency", "2"},
		{"--addr", addr, "--raw", "30303736"},
	} {
		res := runCmd(t, "", args...)
		oneLineError(t, res, exitFailed, "cannot reach relay", "refused")
		assert.Equal(t, res.stdout, "")
	}
}

func TestNoAnswerAndMalformedAnswer(t *testing.T) {
	r := testkit.Start(t, func([]byte) []byte { return nil })
	oneLineError(t, runCmd(t, "", "--addr", r.Addr), exitFailed, "no answer", "connection closed before an answer")

	r = testkit.Start(t, func(f []byte) []byte {
		time.Sleep(100 * time.Millisecond)
		return testkit.Answer0000(f)
	})
	oneLineError(t, runCmd(t, "", "--addr", r.Addr, "--answer-timeout", "0.02"), exitFailed, "no answer", "within 20ms")

	r = testkit.Start(t, func(f []byte) []byte {
		a := testkit.Answer0000(f)
		a[51] = 'Z' // RSP_CODE not in the table
		return a
	})
	oneLineError(t, runCmd(t, "", "--addr", r.Addr), exitFailed, "malformed answer", `RSP_CODE "Z000"`)

	r = testkit.Start(t, func(f []byte) []byte {
		other := append([]byte{}, f...)
		copy(other[12:44], channel.NewGUID())
		return testkit.Answer0000(other)
	})
	res := runCmd(t, "", "--addr", r.Addr)
	oneLineError(t, res, exitFailed, "mismatch: answer to BKTR0001")
	assert.Assert(t, is.Contains(res.stdout, "RSP_CODE"), "the answer is still shown")
}

func TestNon0000AnswerExitsZero(t *testing.T) {
	r := testkit.Start(t, testkit.AnswerCode(generated.RspReadTimeout))
	res := runCmd(t, "", "--addr", r.Addr)
	assert.Equal(t, res.code, 0, res.stderr)
	assert.Assert(t, is.Contains(squeeze(res.stdout), "RSP_CODE E901 sent, result unknown: never resend, inquire"))
	assert.Assert(t, !strings.Contains(res.stdout, "CORE_TXID"))
}

func TestRaw(t *testing.T) {
	r := testkit.Start(t, nil)
	garbage := hex.EncodeToString([]byte("0010BKTR0001zz"))
	res := runCmd(t, "", "--addr", r.Addr, "--raw", garbage)
	assert.Equal(t, res.code, 0, res.stderr)
	assert.Equal(t, string(r.Frames()[0]), "0010BKTR0001zz")
	out := squeeze(res.stdout)
	assert.Assert(t, is.Contains(out, `sent 14 bytes to `+r.Addr+`: "0010BKTR0001zz"`))
	assert.Assert(t, is.Contains(out, "answer 1 80 bytes"))
	assert.Assert(t, is.Contains(out, "RSP_CODE E102 malformed frame or field"))
	assert.Assert(t, is.Contains(out, "TX_CODE BKTR0001"))
	assert.Assert(t, is.Contains(out, "end connection closed by the relay"))

	// A valid frame from a file, JSON output.
	frame, err := channel.BuildRequest("BKTR0001", guid, map[string]string{
		"wdBank": "081", "wdAcct": "1", "dpBank": "081", "dpAcct": "2", "amount": "3", "memo": "",
	}, time.Now())
	assert.NilError(t, err)
	path := filepath.Join(t.TempDir(), "frame")
	assert.NilError(t, os.WriteFile(path, frame, 0o644))
	res = runCmd(t, "", "--addr", r.Addr, "--raw-file", path, "--json")
	assert.Equal(t, res.code, 0, res.stderr)
	var j struct {
		Sent    string `json:"sent"`
		Answers []struct {
			Frame  string         `json:"frame"`
			Answer map[string]any `json:"answer"`
		} `json:"answers"`
		End string `json:"end"`
	}
	assert.NilError(t, json.Unmarshal([]byte(res.stdout), &j))
	assert.Equal(t, j.Sent, string(frame))
	assert.Equal(t, len(j.Answers), 1)
	assert.Equal(t, j.Answers[0].Answer["rspCode"], "0000")
	assert.Equal(t, j.End, "connection closed by the relay")
}

func TestRawMalformedAnswer(t *testing.T) {
	r := testkit.Start(t, func([]byte) []byte { return []byte("0004junk") })
	res := runCmd(t, "", "--addr", r.Addr, "--raw", "30303030", "--answer-timeout", "0.2")
	oneLineError(t, res, exitFailed, "malformed answer")
	assert.Assert(t, is.Contains(res.stdout, `"0004junk"`))
}

func TestLoad(t *testing.T) {
	var seen atomic.Int64
	r := testkit.Start(t, func(f []byte) []byte {
		seen.Add(1)
		return testkit.Answer0000(f)
	})
	res := runCmd(t, "", "--addr", r.Addr, "--count", "40", "--concurrency", "3", "--duplicates", "10", "--rate", "2000")
	assert.Equal(t, res.code, 0, res.stderr)
	assert.Equal(t, res.stderr, "", "no progress bar when stderr is not a terminal")
	assert.Equal(t, seen.Load(), int64(40))
	assert.Equal(t, r.Conns(), 3)
	out := squeeze(res.stdout)
	for _, want := range []string{
		"load 40 × BKTR0001 to " + r.Addr + " over 3 connections",
		"answered 40 of 40 (sent 40, duplicate GUIDs 4)",
		"tx/s", "latency p50 ", "p99 ", "max ",
		"codes 0000 40 p50 ", "posted; the body carries the result",
		"GUIDs by final code 0000 36",
		"mismatches 0", "malformed 0", "errors 0",
	} {
		assert.Assert(t, is.Contains(out, want))
	}

	res = runCmd(t, "", "--addr", r.Addr, "--count", "5", "--tx", "BKIQ0001", "--json")
	assert.Equal(t, res.code, 0, res.stderr)
	var s struct {
		Tx       string `json:"tx"`
		Answered int    `json:"answered"`
		OK       bool   `json:"ok"`
	}
	assert.NilError(t, json.Unmarshal([]byte(res.stdout), &s))
	assert.Equal(t, s.Tx, "BKIQ0001")
	assert.Equal(t, s.Answered, 5)
	assert.Assert(t, s.OK)
}

func TestLoadFixedAmountFromJSONTemplate(t *testing.T) {
	r := testkit.Start(t, nil)
	res := runCmd(t, `{"amount": 77, "memo": "bench"}`, "--addr", r.Addr, "--count", "4", "-")
	assert.Equal(t, res.code, 0, res.stderr)
	for _, f := range r.Frames() {
		_, body, err := channel.DecodeRequest(f)
		assert.NilError(t, err)
		assert.Equal(t, body.(*generated.BKTR0001Request).Amount, int64(77))
		assert.Equal(t, body.(*generated.BKTR0001Request).Memo, "bench")
	}
}

func TestLoadFailuresExitNonZero(t *testing.T) {
	var n atomic.Int64
	r := testkit.Start(t, func(f []byte) []byte {
		if n.Add(1) == 2 {
			return nil
		}
		return testkit.Answer0000(f)
	})
	res := runCmd(t, "", "--addr", r.Addr, "--count", "5")
	oneLineError(t, res, exitFailed, "1 of 5 frames without a valid answer", "errors 1")
	assert.Assert(t, is.Contains(squeeze(res.stdout), "answered 4 of 5"))

	r = testkit.Start(t, func(f []byte) []byte {
		other := append([]byte{}, f...)
		copy(other[4:12], "BKIQ0001")
		return testkit.AnswerCode(generated.RspBadFrame)(other)
	})
	res = runCmd(t, "", "--addr", r.Addr, "--count", "3")
	oneLineError(t, res, exitFailed, "3 of 3 frames", "mismatches 3")
}

func TestHelp(t *testing.T) {
	res := runCmd(t, "", "--help")
	assert.Equal(t, res.code, 0)
	for _, f := range []string{"-wd-bank", "-wd-acct", "-dp-bank", "-dp-acct", "-amount", "-memo", "-bank", "-acct", "-raw-file", "-answer-timeout"} {
		assert.Assert(t, is.Contains(res.stdout, "  "+f+" "))
	}
}

func TestBodyFlagNames(t *testing.T) {
	reserved := func(n string) bool { return n == "tx" || n == "count" }
	got := map[string]string{}
	for _, bf := range bodyFlags(reserved) {
		got[bf.name] = bf.key
	}
	assert.Equal(t, got["wd-bank"], "wdBank")
	assert.Equal(t, got["dp-acct"], "dpAcct")
	assert.Equal(t, got["amount"], "amount")
	assert.Equal(t, len(got), len(channel.AllRequestKeys()))
	for name, key := range got {
		assert.Equal(t, channel.CamelKey(name), key, "kebab→camel gives the JSON key")
	}
}
