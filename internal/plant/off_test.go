//go:build !verifybugs

package plant

import "testing"

// TestOffWithoutTag: a build without verifybugs plants nothing, whatever
// the environment says.
func TestOffWithoutTag(t *testing.T) {
	for _, n := range All {
		t.Setenv(EnvVar, string(n))
		if On(n) {
			t.Errorf("%s is planted in a build without the verifybugs tag", n)
		}
	}
	if Built {
		t.Error("Built is true without the verifybugs tag")
	}
}
