package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"lhrelay/internal/app"
	"lhrelay/internal/ledger"
	"lhrelay/internal/pgtest"
	"lhrelay/internal/testkit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestCopyCommand moves a relay's SQLite file to each store: the counts
// are printed, show, list and stats read the same from the copy, a second
// run copies nothing, and a conflicting row is reported with exit status 1.
func TestCopyCommand(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, target string) {
		src := prepare(t)
		out, err := runOut(t, "copy", "--from", src, "--to", target)
		assert.NilError(t, err)
		assert.Equal(t, out, "copy: read=3 copied=3 present=0 conflicts=0 history=5\n")
		// The copy's history: the source's entries, then the copy's note.
		hist, err := runOut(t, "history", "--db", target, guidDone)
		assert.NilError(t, err)
		assert.Check(t, is.Contains(hist, "none → SENT"))
		assert.Check(t, is.Contains(hist, "copied from "+src))
		_, err = runOut(t, "audit", "--db", target)
		assert.NilError(t, err)

		for _, args := range [][]string{{"stats"}, {"list"}, {"show", guidDone}, {"show", "--json", guidUnknown}} {
			want, err := runOut(t, append([]string{args[0], "--db", src}, args[1:]...)...)
			assert.NilError(t, err)
			got, err := runOut(t, append([]string{args[0], "--db", target}, args[1:]...)...)
			assert.NilError(t, err)
			assert.Equal(t, withoutAges(got), withoutAges(want), args)
		}

		out, err = runOut(t, "copy", "--from", src, "--to", target)
		assert.NilError(t, err)
		assert.Equal(t, out, "copy: read=3 copied=0 present=3 conflicts=0 history=0\n")

		testkit.OpenRaw(t, target, ledger.IsURL(target)).Exec(`UPDATE tx SET attempts = 7 WHERE guid = ?`, guidSent)
		out, err = runOut(t, "copy", "--from", src, "--to", target)
		assert.Check(t, is.Contains(out, "copy: read=3 copied=0 present=2 conflicts=1 history=0\nconflict "+guidSent))
		assert.Equal(t, exitCode(err), 1)
	})
}

// withoutAges blanks the ages stats prints ("1h0m2s ago"): two runs a
// moment apart may round the same row's age to different seconds.
func withoutAges(s string) string { return ages.ReplaceAllString(s, "(… ago;") }

var ages = regexp.MustCompile(`\(\S+ ago;`)

func TestCopyCommandErrors(t *testing.T) {
	src := prepare(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"copy", "--from", src}, "--from and --to are required"},
		{[]string{"copy", "--from", src, "--to", src}, "same ledger"},
		{[]string{"copy", "--from", filepath.Join(t.TempDir(), "missing.db"), "--to", filepath.Join(t.TempDir(), "new.db")}, "--from: ledger: open"},
		{[]string{"copy", "--from", src, "--to", "postgres://u:pw@127.0.0.1:1/x?connect_timeout=1"}, "--to: ledger: open postgres://u@127.0.0.1:1/x"},
	} {
		_, err := runOut(t, tc.args...)
		assert.ErrorContains(t, err, tc.want, tc.args)
		assert.Equal(t, exitCode(err), 2, tc.args)
		assert.Check(t, !strings.Contains(err.Error(), ":pw@"))
	}
}

// exitCode is the exit status run's error stands for.
func exitCode(err error) int { return app.Code(err) }
