//go:build linux || darwin || freebsd

package ledger

import "syscall"

// fileSystemSize is the size in bytes of the file system that holds dir,
// or 0 if it cannot be told: the WAL is then checkpointed at
// walCheckpointPages, as on any large disk.
func fileSystemSize(dir string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0
	}
	return int64(st.Blocks) * int64(st.Bsize)
}
