package relay

import (
	"context"
	"log/slog"
	"net/netip"

	"github.com/zeroio/zeroio/internal/proxyproto"
	"github.com/zeroio/zeroio/udp"
)

// A UDP route carries the PROXY protocol per datagram: each datagram
// from a proxy in front (AcceptProxy) starts with a v2 header whose
// transport is DGRAM, naming the client it relays, and with SendProxy 2
// each datagram to the target starts with one naming the client (the
// spec's section 2.2: a v2 header may precede each datagram; v1 has no
// datagram form). The session is then the proxy's flow and the client's:
// replies go to the proxy, while access lists, balancing, logs and the
// header sent on name the client.

// proxied finds the session for m, a datagram from a proxy in front, and
// where its payload starts after the PROXY header; nil when m is dropped
// (the sender is not a trusted proxy, or its header is not a valid v2
// one), and counted.
func (u *udpRoute) proxied(r *Route, ln *udp.Conn, m *udp.Message, now int64) (*session, int) {
	hp, n, ok := u.proxyHeader(r, m)
	if !ok {
		return nil, 0
	}
	a := arrived(m, hp, n)
	return u.session(r, ln, &a, now, 1), n
}

// proxyHeader reads the PROXY header m starts with: the client it names
// (nil for the sender) and the header's length. ok is false when m is
// dropped, and counted, for its sender or its header.
func (u *udpRoute) proxyHeader(r *Route, m *udp.Message) (hp *proxyproto.Header, n int, ok bool) {
	st := &u.rt.st
	if !trustsPeer(r, m.Addr) {
		st.denied.Add(1)
		return nil, 0, false
	}
	h, n, err := proxyproto.Parse(m.Buf[:m.N])
	if err == nil && h.Version != 2 {
		err = errUDPProxyV1
	}
	if err != nil {
		st.errProxy.Add(1)
		u.proxyFailed(m.Addr, err)
		return nil, 0, false
	}
	// A LOCAL header, or one without addresses, leaves the sender as
	// the client.
	if h.Command == proxyproto.Proxy && h.Source.IsValid() {
		hp = &h
	}
	return hp, n, true
}

var errUDPProxyV1 = proxyError("a PROXY v1 header on a datagram: v1 has no datagram form")

type proxyError string

func (e proxyError) Error() string { return string(e) }

// proxyFailed logs a datagram dropped for its PROXY header, paced as
// sockFailed is: a line per datagram would be a line per packet of a
// misconfigured sender.
func (u *udpRoute) proxyFailed(from netip.AddrPort, err error) {
	log := u.rt.srv.log
	switch begins, n := u.proxyLog.note(); {
	case begins:
		log.Warn("UDP datagram without a valid PROXY header dropped", "route", u.rt.name, "from", from, "err", err)
	case n > 0:
		log.Warn("UDP datagrams without a valid PROXY header still dropped", "route", u.rt.name, "dropped", n, "err", err)
	case log.Enabled(context.Background(), slog.LevelDebug):
		log.Debug("UDP datagram without a valid PROXY header dropped", "route", u.rt.name, "from", from, "err", err)
	}
}
