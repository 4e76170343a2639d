package ledger

import (
	"slices"
	"sync/atomic"
)

// recurring boxes the strings that come back transfer after transfer as
// statement arguments (transaction codes, response codes): a string
// converted to an interface is an allocation, and each of these is
// converted once for the process's life instead of once per statement.
var recurring boxedStrings

// boxedStrings is a small set of strings, each with its one boxed copy. It
// only grows, up to boxedKept strings: lookups are a scan, so a value
// that never recurs (a GUID) must not be put in it.
type boxedStrings struct {
	p atomic.Pointer[[]boxedString]
}

type boxedString struct {
	s string
	v any
}

// boxedKept bounds a boxedStrings: past it a string is boxed afresh every
// time, which is what it costs without the set.
const boxedKept = 32

// box is s as an interface, boxed once if there is room for it.
func (b *boxedStrings) box(s string) any {
	old := b.p.Load()
	if old != nil {
		for _, e := range *old {
			if e.s == s {
				return e.v
			}
		}
	}
	v := any(s)
	if old == nil || len(*old) < boxedKept {
		var next []boxedString
		if old != nil {
			next = slices.Clip(*old)
		}
		next = append(next, boxedString{s, v})
		// Lost to a concurrent add: that one is kept, this one is
		// added the next time s comes.
		b.p.CompareAndSwap(old, &next)
	}
	return v
}
