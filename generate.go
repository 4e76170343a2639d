// Package lhrelay is the LH-STD relay between a bank's channels and its core
// banking system. See README.md.
package lhrelay

//go:generate go run ./gen -layouts layouts -out internal/generated
