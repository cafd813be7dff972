//go:build !unix

package bench

import (
	"os"
	"os/exec"
)

// On GOOS without process groups the relay alone is stopped; the relay
// suites run on linux only.
func ownGroup(cmd *exec.Cmd) {}

func inOwnGroup(cmd *exec.Cmd) bool { return false }

func killGroup(cmd *exec.Cmd, kill bool) {
	if kill {
		cmd.Process.Kill()
	}
}

func ownDir(fi os.FileInfo) bool { return fi.IsDir() }

func openFileLimit() (uint64, bool) { return 0, false }
