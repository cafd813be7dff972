//go:build unix

package bench

import (
	"os"
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

// ownDir reports whether fi, a directory, is the user's and no one else
// can write to it.
func ownDir(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.IsDir() && int(st.Uid) == os.Getuid() && fi.Mode().Perm()&0o022 == 0
}

// openFileLimit returns RLIMIT_NOFILE's soft limit (the Go runtime has
// raised it to the hard one), which the relays started here inherit;
// ok is false if it cannot be read.
func openFileLimit() (limit uint64, ok bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, false
	}
	return uint64(rl.Cur), true
}
