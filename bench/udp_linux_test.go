package bench

import (
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// setSockBuf sizes c's buffers, past net.core.rmem_max when root
// (SO_RCVBUFFORCE needs CAP_NET_ADMIN, socket(7)).
func setSockBuf(tb testing.TB, c *net.UDPConn, n int) {
	rc, err := c.SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	rc.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n) != nil {
			c.SetReadBuffer(n)
		}
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, n) != nil {
			c.SetWriteBuffer(n)
		}
	})
}

func errDeadline() error { return os.ErrDeadlineExceeded }
