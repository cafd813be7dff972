package relay

import (
	"time"

	"github.com/zeroio/zeroio/internal/nbsys"
	"golang.org/x/sys/unix"
)

// setSocketOptions applies a route's per-socket options to a TCP socket
// of a relay, as the goroutine engine does through package net:
// TCP_NODELAY unless Nagle (sockets the loop creates start with Nagle on;
// accepted ones inherit the listener's TCP_NODELAY, set when it was
// adopted), and keep-alive as keepAlive says.
func setSocketOptions(fd int, r *Route, fresh bool) {
	switch {
	case fresh && !r.Nagle:
		nbsys.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	case !fresh && r.Nagle:
		nbsys.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 0)
	}
	ka := keepAlive(r)
	if !ka.Enable {
		return
	}
	secs := func(d time.Duration) int { return int((d + time.Second - 1) / time.Second) }
	nbsys.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
	nbsys.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, secs(ka.Idle))
	nbsys.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, secs(ka.Interval))
	nbsys.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, ka.Count)
}
