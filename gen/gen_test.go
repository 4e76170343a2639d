package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
)

// copyDir copies the files of src (not recursively) into dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	assert.NilError(t, os.MkdirAll(dst, 0o755))
	entries, err := os.ReadDir(src)
	assert.NilError(t, err)
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		assert.NilError(t, err)
		assert.NilError(t, os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644))
	}
}

// TestBrokenLayouts: each folder under testdata/broken holds layout files
// that replace or join the real ones, and want.txt, a line the generator's
// error must contain. Nothing may be generated from a broken set.
func TestBrokenLayouts(t *testing.T) {
	cases, err := os.ReadDir("testdata/broken")
	assert.NilError(t, err)
	assert.Assert(t, len(cases) >= 15)
	for _, c := range cases {
		t.Run(c.Name(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "layouts")
			copyDir(t, "../layouts", dir)
			copyDir(t, filepath.Join("testdata/broken", c.Name(), "layouts"), dir)
			want, err := os.ReadFile(filepath.Join("testdata/broken", c.Name(), "want.txt"))
			assert.NilError(t, err)

			out := filepath.Join(t.TempDir(), "generated")
			err = run(dir, out, "generated")
			assert.Assert(t, err != nil, "a broken layout must not generate")
			assert.Assert(t, is.Contains(err.Error(), strings.TrimSpace(string(want))))
			_, statErr := os.Stat(out)
			assert.Assert(t, os.IsNotExist(statErr), "nothing is written when validation fails")
		})
	}
}

// TestProblemsAreAllReported: one run lists every mistake, not just the first.
func TestProblemsAreAllReported(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layouts")
	copyDir(t, "../layouts", dir)
	copyDir(t, "testdata/broken/gap/layouts", dir)
	copyDir(t, "testdata/broken/rsp-code-length/layouts", dir)
	_, err := Load(dir)
	assert.ErrorContains(t, err, "field AMOUNT: gap")
	assert.ErrorContains(t, err, `"E9011"`)
}

// TestCheckedInCodeIsCurrent: rendering the real layouts gives exactly the
// files in internal/generated, and rendering twice gives the same bytes.
func TestCheckedInCodeIsCurrent(t *testing.T) {
	l, err := Load("../layouts")
	assert.NilError(t, err)
	first, err := Render(l, "generated")
	assert.NilError(t, err)
	l2, err := Load("../layouts")
	assert.NilError(t, err)
	second, err := Render(l2, "generated")
	assert.NilError(t, err)
	assert.Equal(t, len(first), len(second))
	for name, data := range first {
		assert.Assert(t, bytes.Equal(data, second[name]), "%s differs between two runs", name)
		onDisk, err := os.ReadFile(filepath.Join("../internal/generated", name))
		assert.NilError(t, err)
		assert.Assert(t, bytes.Equal(data, onDisk), "internal/generated/%s is stale: run go generate ./...", name)
		firstLine, _, _ := strings.Cut(string(data), "\n")
		assert.Assert(t, is.Regexp(`^// Code generated .* DO NOT EDIT\.$`, firstLine), name)
	}
}

// TestExtensionTransaction proves a transaction is added declaratively: the
// test-only layouts testdata/extension/BKDP0001.layout and BKFX0001.layout
// (a path carrying an integer) are generated into a temporary module
// together with the real layouts, which then compiles and round-trips them
// through the registry with no hand-written code for them.
func TestExtensionTransaction(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module")
	}
	root, err := filepath.Abs("..")
	assert.NilError(t, err)
	mod := t.TempDir()
	layouts := filepath.Join(mod, "layouts")
	copyDir(t, "../layouts", layouts)
	copyDir(t, "testdata/extension", layouts)
	assert.NilError(t, run(layouts, filepath.Join(mod, "generated"), "generated"))

	// The module path sits under lhrelay/ so that it may import
	// lhrelay/internal/fixedwidth, which the generated code is built on.
	goMod := "module lhrelay/exttest\n\ngo 1.22\n\nrequire lhrelay v0.0.0\n\nreplace lhrelay => " + root + "\n"
	assert.NilError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte(goMod), 0o644))
	sum, err := os.ReadFile("../go.sum")
	assert.NilError(t, err)
	assert.NilError(t, os.WriteFile(filepath.Join(mod, "go.sum"), sum, 0o644))
	assert.NilError(t, os.WriteFile(filepath.Join(mod, "generated", "ext_test.go"), []byte(extensionTest), 0o644))

	cmd := exec.Command("go", "test", "-count=1", "./generated/")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	assert.NilError(t, err, string(out))
	assert.Assert(t, is.Contains(string(out), "ok"))
}

// TestExtensionEndToEnd proves that a posting transaction added with a
// layout file (and its code map) alone works in the whole system, its
// settlement included, and breaks none of the existing tests: it copies the
// repository, adds testdata/extension's layouts, runs go generate, and runs
// testdata/extension/e2e (BKXP0001 through relay → E901 → resolve by its
// own lookup → replay → reprocess sending nothing) together with the test
// suites that enumerate the registry.
func TestExtensionEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("copies and builds the repository")
	}
	root, err := filepath.Abs("..")
	assert.NilError(t, err)
	repo := filepath.Join(t.TempDir(), "lhrelay")
	copyTree(t, root, repo)
	copyDir(t, "testdata/extension", filepath.Join(repo, "layouts"))
	copyDir(t, "testdata/extension/e2e", filepath.Join(repo, "internal", "exte2e"))

	goCmd := func(args ...string) string {
		cmd := exec.Command("go", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		assert.NilError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	goCmd("generate", "./...")
	_, err = os.Stat(filepath.Join(repo, "internal", "generated", "bkxp0001.go"))
	assert.NilError(t, err, "go generate wrote the new transaction's codec")
	out := goCmd("test", "-count=1", "./internal/exte2e/", "./internal/generated/", "./internal/channel/", "./internal/wire/", "./internal/corecall/", "./internal/outcome/", "./internal/batch/", "./cmd/lhsend/")
	assert.Assert(t, is.Contains(out, "ok  \tlhrelay/internal/exte2e"))
	t.Log(out)
}

// copyTree copies the repository at src into dst: every directory but .git.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	assert.NilError(t, err)
}

const extensionTest = `package generated

import (
	"errors"
	"testing"

	"lhrelay/internal/fixedwidth"
)

func TestBKDP0001RoundTrip(t *testing.T) {
	tx, ok := LookupTransaction("BKDP0001")
	if !ok {
		t.Fatal("BKDP0001 is not registered")
	}
	if tx.Method != "POST" || !tx.JSONBody || tx.StatusSources[409] != SourceLimitExceeded || tx.Settle != SettleByLookup {
		t.Fatalf("registry entry: %+v", tx)
	}
	body := "081" + "11002003004005" + "0000000050000" + "TELLER01" + "000042"
	req := tx.NewRequest()
	if err := req.Decode(body); err != nil {
		t.Fatal(err)
	}
	out, err := req.AppendTo(nil)
	if err != nil || string(out) != body {
		t.Fatalf("round trip: %q, %v", out, err)
	}
	path, err := req.CorePath()
	if err != nil || path != "/v1/deposits/LHB" {
		t.Fatalf("path %q, %v", path, err)
	}
	path, err = req.LookupPath("0123456789abcdef0123456789abcdef")
	if err != nil || path != "/v1/deposits/LHB/0123456789abcdef0123456789abcdef" {
		t.Fatalf("lookup path %q, %v", path, err)
	}
	js, err := req.CoreJSON("0123456789abcdef0123456789abcdef")
	want := ` + "`" + `{"guid":"0123456789abcdef0123456789abcdef","bank":"LHB","acct":"11002003004005","amount":50000,"teller":"TELLER01","branch":42}` + "`" + `
	if err != nil || string(js) != want {
		t.Fatalf("json %s, %v", js, err)
	}
	rsp := tx.NewResponse()
	if err := rsp.FromCoreJSON([]byte(` + "`" + `{"depId":"D1","balance":1050000,"depositedAt":"20261129103000"}` + "`" + `)); err != nil {
		t.Fatal(err)
	}
	enc, err := rsp.AppendTo(nil)
	if err != nil || len(enc) != tx.ResponseLen {
		t.Fatalf("response %q, %v", enc, err)
	}
	if err := req.Decode(body[:17] + "0000000000000" + body[30:]); err == nil {
		t.Fatal("amount 0 must be refused")
	}
}

// BKFX0001's path carries an integer (the tenor) and a text (the currency).
func TestBKFX0001Path(t *testing.T) {
	tx, ok := LookupTransaction("BKFX0001")
	if !ok || tx.Method != "GET" || tx.JSONBody || tx.Settle != SettleAsNotPosted {
		t.Fatalf("registry entry: %+v, %v", tx, ok)
	}
	req := tx.NewRequest()
	for _, c := range []struct{ body, want string }{{"USD03", "/v1/rates/USD/3"}, {"EUR12", "/v1/rates/EUR/12"}, {"A/B99", "/v1/rates/A%2FB/99"}} {
		body, want := c.body, c.want
		if err := req.Decode(body); err != nil {
			t.Fatal(err)
		}
		if path, err := req.CorePath(); err != nil || path != want {
			t.Fatalf("%q: path %q, %v; want %q", body, path, err, want)
		}
	}
	js, err := req.CoreJSON("0123456789abcdef0123456789abcdef")
	if want := ` + "`" + `{"guid":"0123456789abcdef0123456789abcdef","ccy":"A/B","tenor":99}` + "`" + `; err != nil || string(js) != want {
		t.Fatalf("json %s, %v", js, err)
	}
	if _, err := req.LookupPath("0123456789abcdef0123456789abcdef"); !errors.Is(err, ErrNoLookup) {
		t.Fatalf("lookup none: %v", err)
	}
	if err := req.Decode("USD00"); err == nil {
		t.Fatal("tenor 0 is below min=1")
	}
	for _, body := range []string{"   01", ".  01", ".. 01"} {
		if err := req.Decode(body); err != nil {
			t.Fatal(err)
		}
		_, err := req.CorePath()
		var fe *fixedwidth.FieldError
		if !errors.As(err, &fe) || fe.Layout != "BKFX0001 request" || fe.Field != "CCY" {
			t.Fatalf("%q: path error %v, want field CCY's", body, err)
		}
	}
	rsp := tx.NewResponse()
	if err := rsp.FromCoreJSON([]byte(` + "`" + `{"guid":"0123456789abcdef0123456789abcdef","rate":13852500,"quotedAt":"20261201093000","quoteId":"00000000000000a1"}` + "`" + `)); err != nil {
		t.Fatal(err)
	}
	enc, err := rsp.AppendTo(nil)
	if want := "000013852500" + "20261201093000" + "00000000000000a1"; err != nil || string(enc) != want {
		t.Fatalf("response %q, %v", enc, err)
	}
}
`

func TestGoName(t *testing.T) {
	for in, want := range map[string]string{
		"WD_ACCT": "WdAcct", "GUID": "GUID", "HTTP200": "HTTP200", "GUID_REUSED": "GUIDReused",
		"CORE_TXID": "CoreTxid", "TX_CODE": "TxCode", "BANK": "Bank",
	} {
		assert.Equal(t, goName(in), want)
	}
}

func TestSplitWords(t *testing.T) {
	words, ok := splitWords(`transaction BKTR0001 "account transfer" # comment "x"`)
	assert.Assert(t, ok)
	assert.DeepEqual(t, words, []string{"transaction", "BKTR0001", "account transfer"})
	_, ok = splitWords(`transaction X "open`)
	assert.Assert(t, !ok)
}
