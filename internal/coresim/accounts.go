package coresim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Account is one account held by the core.
type Account struct {
	Bank    string // core bank id, e.g. "LHB"
	Acct    string // account number as the relay sends it (14 digits)
	Balance int64  // won
}

// DefaultAccounts returns the built-in accounts of SPEC §8. The slice is new on
// every call, so a caller may change it.
func DefaultAccounts() []Account {
	return []Account{
		{Bank: "LHB", Acct: "11002003004005", Balance: 1_000_000},
		{Bank: "LHB", Acct: "11002003004006", Balance: 0},
		{Bank: "LHB", Acct: "11002003004007", Balance: 100_000_000},
	}
}

// MaxBalance is the largest balance an accounts file may give: the relay's
// BALANCE field has 15 digits, and a balance it cannot encode would only show up
// later as a puzzling E901.
const MaxBalance = 999_999_999_999_999

// LoadAccounts reads an accounts file: CSV (RFC 4180) whose first record is the
// header
//
//	bank,acct,balance
//
// followed by one account per line, for example
//
//	# demo accounts
//	bank,acct,balance
//	LHB,11002003004005,1000000
//	LHB,11002003004006,0
//
// Lines starting with '#' and blank lines are ignored; spaces after a comma
// are ignored. bank is 1–8 upper-case letters or digits; acct is exactly 14
// digits, the width the relay always sends (a shorter number could never be
// reached, so it is refused rather than silently loaded); balance is a plain
// integer from 0 to MaxBalance (no sign, separators or decimals). A bank and
// account may appear only once, and the file must hold at least one account.
// Errors name the line: "line 4: balance "1,000": not a whole number".
func LoadAccounts(r io.Reader) ([]Account, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = 3
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = true

	var (
		accts  []Account
		seen   = map[string]int{} // bank/acct → line, to name both lines of a duplicate
		header = true
	)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// csv.ParseError already says "record on line N: ...".
			return nil, fmt.Errorf("accounts: %w", err)
		}
		line, _ := cr.FieldPos(0)
		for i := range rec {
			rec[i] = strings.TrimSpace(rec[i])
		}
		if header {
			header = false
			if !strings.EqualFold(rec[0], "bank") || !strings.EqualFold(rec[1], "acct") || !strings.EqualFold(rec[2], "balance") {
				return nil, fmt.Errorf("accounts: line %d: header must be bank,acct,balance, got %s", line, strings.Join(rec, ","))
			}
			continue
		}
		a, err := parseAccount(rec)
		if err != nil {
			return nil, fmt.Errorf("accounts: line %d: %w", line, err)
		}
		key := a.Bank + "/" + a.Acct
		if prev, dup := seen[key]; dup {
			return nil, fmt.Errorf("accounts: line %d: %s %s already given on line %d", line, a.Bank, a.Acct, prev)
		}
		seen[key] = line
		accts = append(accts, a)
	}
	if header {
		return nil, errors.New("accounts: empty file: want a bank,acct,balance header")
	}
	if len(accts) == 0 {
		return nil, errors.New("accounts: no accounts after the header")
	}
	return accts, nil
}

func parseAccount(rec []string) (Account, error) {
	bank, acct, bal := rec[0], rec[1], rec[2]
	if bank == "" || len(bank) > 8 || !allOf(bank, isUpperOrDigit) {
		return Account{}, fmt.Errorf("bank %q: want 1-8 upper-case letters or digits, e.g. LHB", bank)
	}
	if len(acct) != 14 || !allOf(acct, isDigit) {
		return Account{}, fmt.Errorf("acct %q: want exactly 14 digits", acct)
	}
	if bal == "" || !allOf(bal, isDigit) {
		return Account{}, fmt.Errorf("balance %q: not a whole number", bal)
	}
	n, err := strconv.ParseInt(bal, 10, 64)
	if err != nil || n > MaxBalance {
		return Account{}, fmt.Errorf("balance %q: more than %d", bal, int64(MaxBalance))
	}
	return Account{Bank: bank, Acct: acct, Balance: n}, nil
}

func allOf(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool        { return c >= '0' && c <= '9' }
func isUpperOrDigit(c byte) bool { return isDigit(c) || c >= 'A' && c <= 'Z' }
