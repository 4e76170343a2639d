package cliflag

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Version describes the running binary for --version, from the build
// information Go embeds: the command's name, the module and its version
// ("(devel)" for a build from a work tree), the VCS revision and whether the
// tree had uncommitted changes, and the Go version.
//
//	relay: lhrelay (devel), revision 3f2c…e1, modified, go1.26.8
func Version(command string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return command + ": no build information (not built with module support)"
	}
	return formatVersion(command, bi)
}

func formatVersion(command string, bi *debug.BuildInfo) string {
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	parts := []string{fmt.Sprintf("%s: %s %s", command, bi.Main.Path, bi.Main.Version)}
	switch rev := settings["vcs.revision"]; rev {
	case "":
		parts = append(parts, "revision unknown (built without VCS information, e.g. -buildvcs=false)")
	default:
		r := "revision " + rev
		if t := settings["vcs.time"]; t != "" {
			r += " (" + t + ")"
		}
		parts = append(parts, r)
		if settings["vcs.modified"] == "true" {
			parts = append(parts, "modified")
		}
	}
	parts = append(parts, bi.GoVersion)
	return strings.Join(parts, ", ")
}
