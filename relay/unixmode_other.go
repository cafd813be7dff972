//go:build !linux

package relay

import (
	"os"
	"syscall"
)

// setSocketMode does nothing: BSD kernels give a Unix socket's file 0777
// less the umask whatever the socket's mode, so the mode is set by the
// chmod after bind alone.
func setSocketMode(syscall.RawConn, os.FileMode) error { return nil }
