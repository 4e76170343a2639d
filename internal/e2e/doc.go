// Package e2e holds process-level tests of the LH-STD relay: they build
// cmd/relay and cmd/coresim, run them as separate processes on 127.0.0.1
// with a real ledger file, and kill or stop them the way an operating
// system or an operator would (SIGKILL, SIGTERM). The package has no code of
// its own; see its _test.go files. The tests are skipped with -short.
package e2e
