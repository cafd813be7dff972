package relay

import (
	"net"
	"time"

	"github.com/zeroio/zeroio/internal/proxyproto"
)

// What a stream sets on its sockets and sends its target before the
// client's bytes, on every engine.

// maxProxyHeader is the longest PROXY header a route sends: v1's 108
// bytes (v2's for TCP6 is 52).
const maxProxyHeader = 108

// appendProxyHeader appends to b the PROXY header the route sends its
// target before the client's bytes (SendProxy: 1 or 2), carrying the
// client and the address it reached; none for SendProxy 0.
func (st *stream) appendProxyHeader(b []byte) []byte {
	switch st.cfg.SendProxy {
	case 1:
		return proxyproto.AppendV1(b, st.src, st.dst)
	case 2:
		return proxyproto.AppendV2(b, proxyproto.Stream, st.src, st.dst)
	}
	return b
}

// Keep-alive probes as package net sends them (net.KeepAliveConfig's
// defaults): every 15 s, 9 of them.
const (
	keepAliveInterval = 15 * time.Second
	keepAliveCount    = 9
)

// keepAlive is the keep-alive a route sets on both sockets of its
// streams: only if it asks for it (a positive KeepAlive, the idle time
// before the first probe); otherwise the sockets are left without, and
// no system call is made. Streams set TCP_NODELAY on both sockets unless
// the route asks for Nagle.
func keepAlive(r *Route) net.KeepAliveConfig {
	if r.KeepAlive <= 0 {
		return net.KeepAliveConfig{}
	}
	return net.KeepAliveConfig{Enable: true, Idle: r.KeepAlive, Interval: keepAliveInterval, Count: keepAliveCount}
}
