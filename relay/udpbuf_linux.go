package relay

import (
	"os"

	"github.com/zeroio/zeroio/udp"
	"golang.org/x/sys/unix"
)

// setBuffers resizes an open UDP socket's receive and send buffers as
// udp.Options.ReadBuffer and WriteBuffer size a new one: SO_RCVBUFFORCE
// and SO_SNDBUFFORCE first, which a privileged process may use past
// net.core.rmem_max and wmem_max.
func setBuffers(c *udp.Conn, n int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[0], n) != nil {
				if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[1], n); err != nil {
					serr = os.NewSyscallError("setsockopt", err)
				}
			}
		}
	})
	if err != nil {
		return err
	}
	return serr
}
