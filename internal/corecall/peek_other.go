//go:build !unix

package corecall

import "syscall"

// peeker is the non-blocking peek of peek_unix.go; without it every idle
// connection has a watcher goroutine (pool.go).
type peeker struct{}

func newPeeker(syscall.Conn) *peeker { return nil }

func (*peeker) silent() bool { return false }
