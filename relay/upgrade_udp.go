package relay

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/zeroio/zeroio/udp"
)

// The UDP sessions of a hand-over. A session goes over as its socket to
// the target (one descriptor) and what finds it: its client's address
// and the local address it sent to, its PROXY state, its target, when it
// was last used, and the QUIC connection IDs that lead to it. The
// sender's readers and session goroutines go on until it lets go, so
// that its clients' datagrams and their replies keep flowing; from then
// both processes read the same sockets for a moment, and each datagram
// is relayed by whichever reads it. A session the sender opens after its
// state was taken is not handed over: its client's next datagram opens
// one in the receiver. The sessions of routes that share a port (chosen
// by their QUIC ClientHello) go over as any other: they reply from the
// shared sockets, which go over under the address's name.

// sessionRec is a recSession.
type sessionRec struct {
	route         string
	ln            uint16 // which of the route's sockets replies leave from
	client        netip.AddrPort
	local         netip.Addr
	ifidx         uint32
	origin, odest netip.AddrPort
	proxy         []byte
	target        Addr
	idleFor       int64 // nanoseconds since its last datagram
	quic          bool
	version       uint32
	clientID      []byte
	ids           [][]byte
	idLen         uint32
	lastUsed      uint64
}

func (r *sessionRec) append(b []byte) []byte {
	b = putStr(b, r.route)
	b = putU32(b, uint32(r.ln))
	b = putAddrPort(b, r.client)
	b = putAddrPort(b, netip.AddrPortFrom(r.local, 0))
	b = putU32(b, r.ifidx)
	b = putAddrPort(putAddrPort(b, r.origin), r.odest)
	b = putBytes(b, r.proxy)
	b = putStr(putStr(b, r.target.Network), r.target.Address)
	b = putU64(b, uint64(r.idleFor))
	b = putBool(b, r.quic)
	b = putU32(b, r.version)
	b = putBytes(b, r.clientID)
	b = append(b, uint8(len(r.ids)))
	for _, id := range r.ids {
		b = putBytes(b, id)
	}
	b = putU32(b, r.idLen)
	return putU64(b, r.lastUsed)
}

// decodeSession decodes a recSession body carrying nfd descriptors.
func decodeSession(body []byte, nfd int) (sessionRec, error) {
	w := wire{b: body}
	r := sessionRec{route: w.str()}
	ln := w.u32()
	r.client = w.addrPort()
	r.local = w.addrPort().Addr()
	r.ifidx = w.u32()
	r.origin, r.odest = w.addrPort(), w.addrPort()
	r.proxy = w.bytes()
	r.target = Addr{Network: w.str(), Address: w.str()}
	r.idleFor = int64(w.u64())
	r.quic, r.version, r.clientID = w.bool(), w.u32(), w.bytes()
	n := int(w.u8())
	for range min(n, maxSessionIDs) {
		r.ids = append(r.ids, w.bytes())
	}
	r.idLen, r.lastUsed = w.u32(), w.u64()
	if err := w.done(); err != nil {
		return r, err
	}
	r.ln = uint16(ln)
	switch {
	case nfd != 1:
		return r, fmt.Errorf("%w: a session with %d descriptors", errBadFrame, nfd)
	case ln > 1<<16-1 || n > maxSessionIDs || r.idleFor < 0 || !r.client.IsValid() || len(r.proxy) > 256:
		return r, fmt.Errorf("%w: session state", errBadFrame)
	case len(r.clientID) > len(connID{}.id) || r.idLen > uint32(len(connID{}.id)):
		return r, fmt.Errorf("%w: session connection IDs", errBadFrame)
	}
	for _, id := range r.ids {
		if len(id) == 0 || len(id) > len(connID{}.id) {
			return r, fmt.Errorf("%w: session connection IDs", errBadFrame)
		}
	}
	return r, nil
}

// exportSessions adds the sessions of u, a route's own sockets, to x.
// The Server's mu is held.
func (x *export) exportSessions(rt *route) error {
	u := rt.udp
	if u == nil || u.front != nil {
		return nil // a shared address's reader: its routes hold the sessions
	}
	now := time.Now().UnixNano()
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range u.sessions {
		fd, err := rawFD(s.up)
		if err != nil {
			return err
		}
		x.fds = append(x.fds, fd)
		r := s.record(rt.name, now)
		x.add(recSession, []int{fd}, r.append)
	}
	return nil
}

// record describes s, u.mu held.
func (s *session) record(route string, now int64) sessionRec {
	p := s.peer.Load()
	r := sessionRec{route: route, client: p.client, local: p.local, ifidx: uint32(p.ifidx),
		origin: p.origin, odest: p.odest, proxy: p.proxy, target: s.b.addr, idleFor: max(now-s.last.Load(), 0)}
	ln := s.ln.Load()
	for i, l := range s.u.socks() {
		if l.Conn == ln {
			r.ln = uint16(i)
		}
	}
	if q := s.quic; q != nil {
		r.quic, r.version, r.clientID = true, q.version, q.clientID.id[:q.clientID.n]
		for _, id := range q.ids[:q.n] {
			r.ids = append(r.ids, id.id[:id.n])
		}
		r.idLen, r.lastUsed = uint32(q.idLen.Load()), q.lastUsed.Load()
	}
	return r
}

// takenSession is a UDP session a hand-over brought.
type takenSession struct {
	rec sessionRec
	fd  int
}

// adoptSession serves a session a hand-over brought, on its route's
// sockets, before they are read. s.mu is held.
func (s *Server) adoptSession(t *takenSession) {
	rt := s.routes[t.rec.route]
	if rt == nil || rt.udp == nil || rt.udp.front != nil || len(rt.udp.socks()) == 0 {
		closeFDs([]int{t.fd})
		return
	}
	u, r := rt.udp, rt.cfg.Load()
	socks := u.socks()
	uc, err := udpConnOf(t.fd)
	var up *udp.Conn
	if err == nil {
		up, err = udp.NewConn(uc, &udp.Options{DisableGRO: true})
		if err != nil {
			uc.Close()
		}
	}
	if err != nil {
		u.sockFailed(t.rec.client, err)
		return
	}
	rc, _ := uc.SyscallConn()
	se := &session{u: u, b: backendOf(rt, t.rec.target), up: up, rc: rc}
	p := peer{client: t.rec.client, local: t.rec.local, ifidx: int(t.rec.ifidx), origin: t.rec.origin, odest: t.rec.odest, proxy: t.rec.proxy}
	se.peer.Store(&p)
	se.ln.Store(socks[int(t.rec.ln)%len(socks)].Conn)
	se.last.Store(time.Now().UnixNano() - t.rec.idleFor)
	u.mu.Lock()
	u.sessions[p.key()] = se
	if t.rec.quic {
		q := &quicSession{version: t.rec.version, clientID: connIDOf(t.rec.clientID)}
		q.idLen.Store(int32(t.rec.idLen))
		q.lastUsed.Store(t.rec.lastUsed)
		se.quic = q
		for _, id := range t.rec.ids {
			u.addID(se, connIDOf(id))
		}
	}
	u.mu.Unlock()
	se.b.connStart()
	rt.st.udpSessions.Add(1)
	rt.st.udpSessionsTotal.Add(1)
	s.serveWG.Add(1)
	go se.run(r.SessionTimeout)
}

// backendOf returns rt's target at a, or a detached one that only
// counts, if rt no longer has it.
func backendOf(rt *route, a Addr) *backend {
	for _, b := range rt.targets().bs {
		if b.addr == a {
			return b
		}
	}
	return newBackend(rt, a, Addr{})
}
