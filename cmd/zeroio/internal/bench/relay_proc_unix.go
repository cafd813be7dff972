//go:build unix

package bench

import (
	"os/exec"
	"syscall"
)

// ownGroup puts the relay in its own process group, so that stopping it
// also stops the children socat forks per connection.
func ownGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// inOwnGroup reports whether ownGroup put cmd in a process group of its own.
func inOwnGroup(cmd *exec.Cmd) bool { return cmd.SysProcAttr != nil && cmd.SysProcAttr.Setpgid }

// killGroup sends sig to the relay's process group.
func killGroup(cmd *exec.Cmd, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	syscall.Kill(-cmd.Process.Pid, sig)
}
