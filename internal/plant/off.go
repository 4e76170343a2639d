//go:build !verifybugs

package plant

// On reports whether the mistake n is planted: never, in this build.
func On(Name) bool { return false }

// Built reports whether this binary was built with the verifybugs tag.
const Built = false
