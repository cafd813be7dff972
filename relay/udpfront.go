package relay

import (
	"net"
	"sync/atomic"

	"github.com/zeroio/zeroio/internal/proxyproto"
	"github.com/zeroio/zeroio/udp"
)

// A UDP listen address shared by several routes (or whose only route has
// SNI or ALPN) is a udpFront: one set of sockets, read by one route of its
// own that no configuration names (sock), and a route table over the
// routes that share it, each keeping its own sessions (a member's udpRoute
// has no sockets). A datagram is first looked up among the sessions of
// every member, by address and by QUIC connection ID, so an established
// flow costs a map lookup per member and nothing more; a client without a
// session is held (udphold.go) until its QUIC ClientHello is whole, then
// matched with the table stream routes use, and its session opens on the
// route chosen, which receives the held datagrams in the order they came.

// udpFront is a UDP listen address shared by routes.
type udpFront struct {
	srv   *Server
	key   string // frontKey of its routes
	sock  *route // reads the sockets; its udp holds them
	table atomic.Pointer[routeTable]
	hold  holdState
	st    udpFrontCounters
	log   pauseLog // clients not routed by their hello (unrouted)
}

// udpFrontCounters count, per client, why its first datagrams chose no
// route by a QUIC ClientHello, and the datagrams dropped for want of a
// route.
type udpFrontCounters struct {
	notQUIC, version, undecryptable, malformed, tooLarge, timeout, heldLimit atomic.Uint64
	unmatched, dropped                                                       atomic.Uint64
}

// Why a client was not routed by its hello, as metrics and logs name it.
const (
	unroutedNotQUIC       = "not_quic"
	unroutedVersion       = "quic_version"
	unroutedUndecryptable = "undecryptable"
	unroutedMalformed     = "malformed"
	unroutedTooLarge      = "too_large"
	unroutedTimeout       = "hello_timeout"
	unroutedHeldLimit     = "held_limit"
	unroutedUnmatched     = "unmatched"
)

func (c *udpFrontCounters) of(reason string) *atomic.Uint64 {
	switch reason {
	case unroutedNotQUIC:
		return &c.notQUIC
	case unroutedVersion:
		return &c.version
	case unroutedUndecryptable:
		return &c.undecryptable
	case unroutedMalformed:
		return &c.malformed
	case unroutedTooLarge:
		return &c.tooLarge
	case unroutedTimeout:
		return &c.timeout
	case unroutedHeldLimit:
		return &c.heldLimit
	}
	return &c.unmatched
}

// newUDPFront returns a front for routes configured as rs (one key),
// whose socket route is configured from rs[0]; its sockets are opened,
// or taken over, by the reload that made it.
func newUDPFront(s *Server, key string, rs []Route) *udpFront {
	f := &udpFront{srv: s, key: key}
	f.hold.f = f
	f.sock = newRoute(s, sockRoute(key, &rs[0]), nil)
	return f
}

// sockRoute is the configuration of the route that reads a front's
// sockets: the listener-level settings of r, which its routes share, and
// no target.
func sockRoute(key string, r *Route) Route {
	return Route{
		Name: key, Listen: r.Listen, Workers: r.Workers, UDPBuffer: r.UDPBuffer, ListenOverlap: r.ListenOverlap,
		AcceptProxy: r.AcceptProxy, TrustedProxies: r.TrustedProxies,
	}
}

// find returns the session of the client datagram m, read from ln, and
// where its payload starts (after a PROXY header): a member's session
// under way, or one opened for it now. nil means the datagram is held,
// was sent on with those held before it, or was dropped and counted.
func (f *udpFront) find(r *Route, ln *udp.Conn, m *udp.Message, now int64) (*session, int) {
	var hp *proxyproto.Header
	skip := 0
	if r.AcceptProxy {
		var ok bool
		if hp, skip, ok = f.sock.udp.proxyHeader(r, m); !ok {
			return nil, 0
		}
	}
	a := arrived(m, hp, skip)
	t := f.table.Load()
	for _, rt := range t.routes {
		if s := rt.udp.find(&a, now); s != nil {
			return s, skip
		}
	}
	if !t.needsHello() {
		return f.open(t.only(), ln, &a, now, nil, 1), skip
	}
	if rt := byServerID(t, a.payload); rt != nil {
		return f.open(rt, ln, &a, now, nil, 1), skip
	}
	return f.hold.add(t, ln, &a, now), skip
}

// byServerID returns the route of t one of whose targets the connection
// ID of the QUIC datagram b names by its server ID (see QUICLB): a client
// that migrated to a new path and a new ID sends no hello, and its
// session opens on its route as it would on a route alone on its address.
func byServerID(t *routeTable, b []byte) *route {
	if len(b) == 0 || b[0]&0x40 == 0 { // QUIC's fixed bit
		return nil
	}
	for _, rt := range t.routes {
		if q := rt.cfg.Load().QUICLB; q != nil {
			if i, _ := serverFor(q, rt.targets(), b); i >= 0 {
				return rt
			}
		}
	}
	return nil
}

// open opens the session of the client of a on rt (nil: no route takes
// it) and sends on held, the client's datagrams held before a, in order;
// it returns the session, to which the caller sends the extra datagrams
// it has (a's, or none when a is the last of held). If there is no
// route, they are all dropped and counted.
func (f *udpFront) open(rt *route, ln *udp.Conn, a *arrival, now int64, held [][]byte, extra uint64) *session {
	n := uint64(len(held)) + extra
	if rt == nil {
		f.st.dropped.Add(n)
		return nil
	}
	r := rt.cfg.Load()
	s := rt.udp.session(r, ln, a, now, n)
	if s == nil || len(held) == 0 {
		return s
	}
	msgs := make([]udp.Message, len(held))
	for i, b := range held {
		msgs[i].Buf = b
	}
	sc := &readScratch{out: msgs}
	if p := s.peer.Load(); p.proxy != nil {
		sc.prefix(p.proxy)
	}
	s.u.forward(r, s, sc.out)
	return s
}

// find, with u a route's sessions, returns the session of the client of
// a under way, marked used at now: by address, or by a QUIC connection ID
// it carries (the session then moves to a's address). nil if none.
func (u *udpRoute) find(a *arrival, now int64) *session {
	u.mu.Lock()
	defer u.mu.Unlock()
	if s := u.at(a); s != nil {
		s.touch(now)
		return s
	}
	return u.follow(a, now)
}

// close stops f: held datagrams are dropped, and its sockets close once
// their reader has relayed what they hold (to routes the caller stops
// after).
func (f *udpFront) close() {
	f.hold.close()
	f.sock.stop()
	f.sock.targets().close()
}

// addrs are the addresses of f's sockets.
func (f *udpFront) addrs() []net.Addr { return f.sock.udp.addrs() }

// stats returns f's counters.
func (f *udpFront) stats() FrontStats {
	c := &f.sock.st
	fs := FrontStats{
		Listen:    f.sock.cfg.Load().Listen.String(),
		Unmatched: f.st.unmatched.Load(), ProxyHeaderErrors: c.errProxy.Load(), Untrusted: c.denied.Load(),
		AcceptErrors: c.errAccept.Load(),
		UDP: &UDPFrontStats{
			NotQUIC: f.st.notQUIC.Load(), Version: f.st.version.Load(), Undecryptable: f.st.undecryptable.Load(),
			Malformed: f.st.malformed.Load(), TooLarge: f.st.tooLarge.Load(), HelloTimeouts: f.st.timeout.Load(),
			HeldLimit: f.st.heldLimit.Load(), Dropped: f.st.dropped.Load(), DropsTruncated: c.udpDropTruncated.Load(),
			Held: f.hold.count(),
		},
	}
	if as := f.addrs(); f.sock.cfg.Load().Listen.port() == 0 && len(as) > 0 {
		fs.Listen = Addr{f.sock.cfg.Load().Listen.Network, as[0].String()}.String()
	}
	for _, rt := range f.table.Load().routes {
		fs.Routes = append(fs.Routes, rt.name)
	}
	return fs
}

// UDPFrontStats are the counters of a UDP listen address shared by
// routes, for clients whose first datagrams chose no route by a QUIC
// ClientHello. Each such client went to the address's default route (the
// one without SNI or ALPN), or was dropped if it has none.
type UDPFrontStats struct {
	// NotQUIC clients sent a first datagram that is not a QUIC long
	// header packet; Version ones a QUIC version the relay cannot read
	// (not 1 or 2); Undecryptable ones an Initial that does not open
	// with the keys its connection ID derives; Malformed ones a packet
	// or CRYPTO stream that is not a QUIC Initial carrying a
	// ClientHello.
	NotQUIC, Version, Undecryptable, Malformed uint64
	// TooLarge clients sent more datagrams or bytes than are held for a
	// hello, or a hello over its bound; HelloTimeouts sent no whole
	// hello within the time a client is held; HeldLimit found the
	// address holding as many clients as it may.
	TooLarge, HelloTimeouts, HeldLimit uint64
	// Dropped counts datagrams dropped because no route took their
	// client: no route matches its hello (FrontStats.Unmatched counts
	// those clients), or it fell back with no default route.
	Dropped uint64
	// DropsTruncated counts datagrams longer than the receive buffer.
	DropsTruncated uint64
	// Held is the number of clients whose datagrams are held now.
	Held int
}
