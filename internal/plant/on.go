//go:build verifybugs

package plant

import (
	"os"
	"sync"
)

var planted = sync.OnceValue(func() Name { return Name(os.Getenv(EnvVar)) })

// On reports whether the mistake n is the one LHRELAY_PLANT names.
func On(n Name) bool { return planted() == n }

// Built reports whether this binary was built with the verifybugs tag.
const Built = true
