//go:build !(linux || darwin || freebsd)

package ledger

// fileSystemSize is 0, unknown, here: the WAL is checkpointed at
// walCheckpointPages whatever the file system.
func fileSystemSize(string) int64 { return 0 }
