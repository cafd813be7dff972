//go:build !linux

package bench

import (
	"net"
	"os"
	"testing"
)

// setSockBuf sizes c's buffers as far as the system allows.
func setSockBuf(_ testing.TB, c *net.UDPConn, n int) {
	c.SetReadBuffer(n)
	c.SetWriteBuffer(n)
}

// setSockBufOnPort is a no-op: wireguard-go keeps its own buffer sizes.
func setSockBufOnPort(testing.TB, uint16, int) {}

func errDeadline() error { return os.ErrDeadlineExceeded }

// selfCPUNs returns 0: the CPU time is not reported off Linux.
func selfCPUNs() int64 { return 0 }
