package coresim_test

import (
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"lhrelay/internal/coresim"
)

func TestLoadAccounts(t *testing.T) {
	const file = `# demo accounts
bank,acct,balance

LHB,11002003004005,1000000
# a comment between records
LHB, 11002003004006 ,0
KBK,22002003004005,999999999999999
`
	got, err := coresim.LoadAccounts(strings.NewReader(file))
	assert.NilError(t, err)
	assert.DeepEqual(t, got, []coresim.Account{
		{Bank: "LHB", Acct: "11002003004005", Balance: 1_000_000},
		{Bank: "LHB", Acct: "11002003004006", Balance: 0},
		{Bank: "KBK", Acct: "22002003004005", Balance: coresim.MaxBalance},
	})

	// The header's case does not matter; CRLF line ends are fine.
	got, err = coresim.LoadAccounts(strings.NewReader("Bank,Acct,Balance\r\nLHB,11002003004005,5\r\n"))
	assert.NilError(t, err)
	assert.Equal(t, len(got), 1)
}

func TestLoadAccountsErrors(t *testing.T) {
	const header = "bank,acct,balance\n"
	cases := []struct {
		name, file, err string
	}{
		{"empty", "", "empty file"},
		{"only comments", "# nothing\n\n", "empty file"},
		{"no accounts", header, "no accounts"},
		{"bad header", "bank,account,balance\nLHB,11002003004005,1\n", "line 1: header must be bank,acct,balance"},
		{"no header", "LHB,11002003004005,1\n", "line 1: header"},
		{"too few fields", header + "LHB,11002003004005\n", "line 2"},
		{"too many fields", header + "# x\nLHB,11002003004005,1,2\n", "line 3"},
		{"bad quote", header + "LHB,\"1100\"2003004005,1\n", "line 2"},
		{"lower bank", header + "lhb,11002003004005,1\n", `line 2: bank "lhb"`},
		{"empty bank", header + ",11002003004005,1\n", `line 2: bank ""`},
		{"short acct", header + "LHB,1100200300400,1\n", `line 2: acct "1100200300400": want exactly 14 digits`},
		{"acct letters", header + "LHB,1100200300400x,1\n", `line 2: acct`},
		{"negative", header + "LHB,11002003004005,-1\n", `line 2: balance "-1": not a whole number`},
		{"decimal", header + "LHB,11002003004005,1.5\n", `line 2: balance "1.5"`},
		{"separators", header + "LHB,11002003004005,\"1,000\"\n", `line 2: balance "1,000"`},
		{"empty balance", header + "LHB,11002003004005,\n", `line 2: balance ""`},
		{"too big", header + "LHB,11002003004005,1000000000000000\n", "line 2: balance \"1000000000000000\": more than 999999999999999"},
		{"duplicate", header + "LHB,11002003004005,1\n\n# again\nLHB,11002003004005,2\n", "line 5: LHB 11002003004005 already given on line 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := coresim.LoadAccounts(strings.NewReader(tc.file))
			assert.ErrorContains(t, err, tc.err)
			assert.ErrorContains(t, err, "accounts: ")
		})
	}
}
