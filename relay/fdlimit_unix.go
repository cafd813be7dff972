//go:build unix

package relay

import "syscall"

// descriptorLimit returns the process's soft limit on open descriptors
// (RLIMIT_NOFILE), or 0 if there is none to speak of. Go's os package
// already raised the soft limit to the hard one at start-up on Linux and
// the BSDs (Go issue 46279), so this is what the relay may use.
func descriptorLimit() int64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<30 {
		return 0
	}
	return int64(r.Cur)
}
