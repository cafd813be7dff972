package relay

import (
	"net"
	"net/netip"

	"github.com/zeroio/zeroio/internal/proxyproto"
	"github.com/zeroio/zeroio/udp"
)

// peer is where a session's client is: its address, and the local address
// (and interface) it sent to, which replies leave from.
type peer struct {
	client netip.AddrPort // where replies go: the client, or the proxy in front of it
	local  netip.Addr
	ifidx  int
	origin netip.AddrPort // the client a PROXY header named (accept_proxy)
	odest  netip.AddrPort // and the address that client sent to
	proxy  []byte         // the PROXY v2 header each datagram to the target starts with (send_proxy)
}

func (p *peer) key() sessionKey { return sessionKey{p.client, p.local, p.origin} }

// who is the client: the one a PROXY header named, or the sender.
func (p *peer) who() netip.AddrPort {
	if p.origin.IsValid() {
		return p.origin
	}
	return p.client
}

// client is the session's client address now.
func (s *session) client() netip.AddrPort { return s.peer.Load().client }

// unlink, with u.mu held, removes s from the route's sessions, and the
// QUIC connection IDs that lead to it, if they still do.
func (u *udpRoute) unlink(s *session) {
	if k := s.peer.Load().key(); u.sessions[k] == s {
		delete(u.sessions, k)
	}
	u.forgetIDs(s)
}

// arrival is a client datagram as sessions see it: where it came from,
// and its payload (after any PROXY header; nil when not at hand).
type arrival struct {
	peer
	payload []byte
}

// arrived describes m, read from a route's socket, whose payload starts
// at skip (after a PROXY header naming origin).
func arrived(m *udp.Message, h *proxyproto.Header, skip int) arrival {
	a := arrival{peer{client: m.Addr, local: m.Local, ifidx: m.IfIndex}, m.Buf[skip:m.N]}
	if h != nil {
		a.origin, a.odest = h.Source, h.Destination
	}
	return a
}

// dest is the address the client of p sent to, as a PROXY header names
// it: the one a header it came with named, or the local address of the
// route's socket ln it reached (with packet info, the host's address it
// used).
func dest(ln *udp.Conn, p *peer) netip.AddrPort {
	if p.odest.IsValid() {
		return p.odest
	}
	la := ln.LocalAddr().(*net.UDPAddr).AddrPort()
	if p.local.IsValid() {
		return netip.AddrPortFrom(p.local, la.Port())
	}
	return la
}
