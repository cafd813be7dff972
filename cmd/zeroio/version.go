package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is the version a release build sets with
// -ldflags "-X main.version=v1.2.3"; without it, the module's version
// from the build information, or "(devel)".
var version string

func runVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "zeroio version: takes no arguments")
		return 2
	}
	v, rev := buildVersion()
	if rev != "" {
		rev = " " + rev
	}
	fmt.Fprintf(stdout, "zeroio %s%s %s %s/%s\n", v, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}

// buildVersion returns the binary's version and VCS revision ("" if
// unknown).
func buildVersion() (v, rev string) {
	v = "(devel)"
	bi, ok := debug.ReadBuildInfo()
	if ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	if version != "" {
		v = version
	}
	if ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	return v, rev
}
