//go:build !linux

package relay

import (
	"errors"
	"runtime"
	"syscall"
)

// On GOOS other than linux, Workers > 1 is refused: SO_REUSEPORT does not
// balance accepts the same way everywhere (FreeBSD needs SO_REUSEPORT_LB,
// Windows has no equivalent), so one listener serves each route.
func reusePortSupported() error {
	return errors.New("workers > 1 needs SO_REUSEPORT load balancing, supported on linux only, not " + runtime.GOOS)
}

func setReusePort(network, address string, c syscall.RawConn) error {
	return reusePortSupported()
}
