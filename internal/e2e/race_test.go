//go:build race

package e2e

// The binaries under test are built with the race detector when the tests
// themselves are: a race in the relay process then fails its exit status.
func init() { buildFlags = append(buildFlags, "-race") }
