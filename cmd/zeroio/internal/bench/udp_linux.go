package bench

import (
	"net"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// setSockBuf sizes c's buffers, past net.core.rmem_max when root
// (SO_RCVBUFFORCE needs CAP_NET_ADMIN, socket(7)).
func setSockBuf(tb testing.TB, c *net.UDPConn, n int) {
	rc, err := c.SyscallConn()
	if err != nil {
		fatal(tb, err)
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

// setSockBufOnPort sizes the buffers of this process's UDP sockets bound to
// port: wireguard-go's StdNetBind keeps its sockets to itself and sizes
// them 7 MiB, so this gives it the same buffers as every other impl.
func setSockBufOnPort(tb testing.TB, port uint16, n int) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Logf("cannot size wireguard-go's sockets: %v", err)
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_DGRAM {
			continue
		}
		sa, err := unix.Getsockname(fd)
		if err != nil {
			continue
		}
		var p int
		switch sa := sa.(type) {
		case *unix.SockaddrInet4:
			p = sa.Port
		case *unix.SockaddrInet6:
			p = sa.Port
		}
		if p == int(port) {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n)
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, n)
		}
	}
}

func errDeadline() error { return os.ErrDeadlineExceeded }

// selfCPUNs returns the CPU time (user and system) this process has spent,
// in nanoseconds, at the microseconds getrusage(2) counts in.
func selfCPUNs() int64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
