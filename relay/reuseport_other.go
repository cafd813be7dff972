//go:build !linux

package relay

import (
	"errors"
	"net"
	"runtime"
	"syscall"
)

// On GOOS other than linux, Workers > 1 is refused: SO_REUSEPORT does not
// balance accepts the same way everywhere (FreeBSD needs SO_REUSEPORT_LB,
// Windows has no equivalent), so one socket serves each route, and a
// reload that would share a port between two of them fails instead (a
// UDP route is stopped first).
func reusePortSupported() error {
	return errors.New("workers > 1 needs SO_REUSEPORT load balancing, supported on linux only, not " + runtime.GOOS)
}

// controller is a socket whose options can be set.
type controller interface {
	Control(f func(fd uintptr)) error
}

func reusePort(c controller) error { return reusePortSupported() }

func setReusePort(network, address string, c syscall.RawConn) error {
	return reusePortSupported()
}

func steer(c controller, first, n int) error { return reusePortSupported() }

func listenerControl(ln net.Listener) controller { return nil }
