package relay

import (
	"syscall"

	"golang.org/x/sys/unix"
)

func reusePortSupported() error { return nil }

// setReusePort lets several listeners bind one address; the kernel spreads
// incoming connections over them (socket(7), SO_REUSEPORT, Linux 3.9).
func setReusePort(network, address string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}
