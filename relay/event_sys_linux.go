package relay

import (
	"time"

	"github.com/zeroio/zeroio/internal/nbsys"
	"golang.org/x/sys/unix"
)

// Keep-alive probes as package net sends them (net.KeepAliveConfig's
// defaults), which the goroutine engine applies: every 15 s, 9 of them.
const (
	keepAliveInterval = 15 * time.Second
	keepAliveCount    = 9
)

// setSocketOptions applies a route's per-socket options to a TCP socket
// of a relay, as the goroutine engine does through package net:
// TCP_NODELAY unless Nagle (sockets the loop creates start with Nagle on;
// accepted ones inherit the listener's TCP_NODELAY, set when it was
// adopted), and keep-alive only if the route asks for it (a positive
// period), with package net's probe interval and count.
func setSocketOptions(fd int, r *Route, fresh bool) {
	switch {
	case fresh && !r.Nagle:
		nbsys.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	case !fresh && r.Nagle:
		nbsys.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 0)
	}
	if r.KeepAlive <= 0 { // keep-alive only when asked
		return
	}
	idle := r.KeepAlive
	secs := int((idle + time.Second - 1) / time.Second)
	nbsys.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
	nbsys.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, secs)
	nbsys.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, int(keepAliveInterval/time.Second))
	nbsys.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, keepAliveCount)
}
