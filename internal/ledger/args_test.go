package ledger

import (
	"fmt"
	"strconv"
	"testing"

	"gotest.tools/v3/assert"
)

// recurring strings are boxed once, up to boxedKept of them; past that a
// string is boxed afresh, and every one comes back as itself.
func TestBoxedStrings(t *testing.T) {
	var b boxedStrings
	code := fmt.Sprint(1000) // not a constant: boxing it allocates
	assert.Equal(t, b.box(code), any("1000"))
	assert.Equal(t, testing.AllocsPerRun(20, func() { b.box(code) }), 0.0)
	for i := range 2 * boxedKept {
		s := fmt.Sprint("code", i)
		assert.Equal(t, b.box(s), any(s))
		assert.Equal(t, b.box(s), any(s))
	}
	assert.Equal(t, len(*b.p.Load()), boxedKept)
	assert.Equal(t, testing.AllocsPerRun(20, func() { b.box(code) }), 0.0)
}

// boxes keeps what every entry repeats when it makes room: a batch's
// entries cost one box each (the hash; PrevHash is the last one's), and
// the actor, states, codes and reasons one each for the whole batch.
func TestBoxesKeepWhatRecurs(t *testing.T) {
	recurs := make([]string, 8)
	for i := range recurs {
		recurs[i] = fmt.Sprint("recurring-", i)
	}
	const entries = 100
	hashes := make([]string, entries)
	for i := range hashes {
		hashes[i] = fmt.Sprintf("%064d", i)
	}
	var b boxes
	var wrong int
	batch := func() {
		b.reset()
		prev := ""
		for _, h := range hashes {
			for _, s := range recurs[:4] {
				if b.str(s).(string) != s {
					wrong++
				}
			}
			if b.str(prev).(string) != prev || b.str(h).(string) != h {
				wrong++
			}
			for _, s := range recurs[4:] {
				if b.str(s).(string) != s {
					wrong++
				}
			}
			prev = h
		}
	}
	// len(recurs), the hashes, and the first PrevHash ("" boxes for free).
	assert.Equal(t, testing.AllocsPerRun(5, batch), float64(len(recurs)+entries))
	assert.Equal(t, wrong, 0)
}

// Claim tokens are made a block at a time and given in order: each is
// the prefix and the next count, never one twice, at well under one
// allocation a claim.
func TestClaimTokens(t *testing.T) {
	l := &Ledger{tokenPrefix: "prefix."}
	seen := map[string]bool{}
	for i := 1; i <= 3*claimTokenBlock+5; i++ {
		tok := l.newClaimToken()
		assert.Equal(t, tok, "prefix."+strconv.FormatUint(uint64(i), 36))
		assert.Assert(t, !seen[tok], "token %s given twice", tok)
		seen[tok] = true
	}
	assert.Equal(t, testing.AllocsPerRun(4*claimTokenBlock, func() { l.newClaimToken() }), 0.0)
}
