package main

import "strconv"

// locals hands out the names of one generated function's local variables.
// A local named after its field (bank for BANK) reads like hand-written
// code, but a field's name is the analyst's choice: TYPE, NIL, R or DST
// would otherwise become a keyword, a predeclared name the function calls,
// its receiver or a parameter, and BANK_SEG would clash with BANK's
// segment. A name already taken gets a number (bank2) instead.
type locals map[string]bool

// newLocals starts the names of a function whose parameters, receiver and
// fixed locals are taken.
func newLocals(taken ...string) locals {
	l := locals{}
	for _, s := range goReserved {
		l[s] = true
	}
	for _, s := range taken {
		l[s] = true
	}
	return l
}

// name returns base, or base with the smallest number from 2 that is free,
// and takes it.
func (l locals) name(base string) string {
	n := base
	for i := 2; l[n]; i++ {
		n = base + strconv.Itoa(i)
	}
	l[n] = true
	return n
}

// goReserved are the names no generated local may take: Go's keywords, its
// predeclared identifiers, and the packages the generated files import.
var goReserved = []string{
	"break", "case", "chan", "const", "continue", "default", "defer", "else",
	"fallthrough", "for", "func", "go", "goto", "if", "import", "interface",
	"map", "package", "range", "return", "select", "struct", "switch", "type", "var",

	"any", "bool", "byte", "comparable", "complex64", "complex128", "error",
	"float32", "float64", "int", "int8", "int16", "int32", "int64", "rune",
	"string", "uint", "uint8", "uint16", "uint32", "uint64", "uintptr",
	"true", "false", "iota", "nil",
	"append", "cap", "clear", "close", "complex", "copy", "delete", "imag",
	"len", "make", "max", "min", "new", "panic", "print", "println", "real", "recover",

	"corejson", "errors", "fixedwidth", "fmt", "strconv", "url",
}
