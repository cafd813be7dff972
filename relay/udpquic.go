package relay

import (
	"sync/atomic"

	"github.com/zeroio/zeroio/internal/proxyproto"
	"github.com/zeroio/zeroio/internal/quichello"
	"github.com/zeroio/zeroio/udp"
)

// A UDP session is found by its client's address; a QUIC client's address
// may change under it (a NAT rebinding its port, or a client migrating to
// another network while keeping its connection ID), and a new session
// would then balance it onto a target that does not know its connection.
// So a session opened by a QUIC Initial also learns the connection IDs its
// target chose (the source IDs of the target's long-header packets,
// addressed to the client's own ID), and a datagram from an unknown
// address that carries one of them moves the session to that address.
// Other UDP traffic keeps its sessions by address alone: a session learns
// IDs only from a target that answers a version 1 or 2 Initial as QUIC
// does, so no other protocol's bytes can be taken for an ID.

// maxSessionIDs bounds the connection IDs kept per session: a target's
// handshake chooses one; the rest are issued encrypted (NEW_CONNECTION_ID)
// and cannot be seen by a relay.
const maxSessionIDs = 4

// connID is a connection ID as a map key.
type connID struct {
	n  uint8
	id [quichello.MaxConnIDLen]byte
}

func connIDOf(b []byte) connID {
	var c connID
	c.n = uint8(copy(c.id[:], b))
	return c
}

// quicIDs maps the connection IDs that lead to a route's sessions, under
// udpRoute.mu. Short-header packets carry their ID without its length, so
// lens has bit n set when some target chose IDs n bytes long.
type quicIDs struct {
	m    map[connID]*session
	lens uint32
}

// quicSession is what a session knows of its QUIC connection.
type quicSession struct {
	version  uint32
	clientID connID // the client's source ID: the target's packets are addressed to it
	// Under udpRoute.mu: the IDs that lead to the session, oldest first.
	ids [maxSessionIDs]connID
	n   int
	// The session goroutine's own: the last ID it learned, so that a
	// handshake's many packets with one ID take the lock once.
	learned connID
	// idLen is the length of the IDs the target chose, once one is
	// learned; lastUsed a hash of the last ID the client sent to.
	idLen    atomic.Int32
	lastUsed atomic.Uint64
}

// openedQUIC, with u.mu held, makes s, a session just opened for the
// datagram m, follow its QUIC connection if m is a client's Initial, or
// if m went to s's target by the server ID in its connection ID cid.
func (u *udpRoute) openedQUIC(s *session, b []byte, cid []byte) {
	if cid != nil {
		s.quic = &quicSession{}
		s.quic.idLen.Store(int32(len(cid)))
		u.addID(s, connIDOf(cid))
		return
	}
	if len(b) == 0 || b[0]&0xc0 != 0xc0 {
		return
	}
	h, err := quichello.ParseLong(b)
	if err != nil || h.Type != quichello.TypeInitial || len(h.DstConnID) < 8 {
		return
	}
	s.quic = &quicSession{version: h.Version, clientID: connIDOf(h.SrcConnID)}
	// The client's first destination ID leads here too, until the
	// target's own replaces it: a client that moves before the
	// handshake's first answer retransmits its Initial with it.
	u.addID(s, connIDOf(h.DstConnID))
}

// learnIDs takes the connection IDs the target chose from its replies in
// msgs (the session goroutine's).
func (s *session) learnIDs(msgs []udp.Message) {
	q := s.quic
	for i := range msgs {
		b := msgs[i].Buf[:msgs[i].N]
		if len(b) == 0 || b[0]&0xc0 != 0xc0 {
			continue
		}
		h, err := quichello.ParseLong(b)
		if err != nil || h.Version != q.version || len(h.SrcConnID) == 0 ||
			connIDOf(h.DstConnID) != q.clientID {
			continue
		}
		id := connIDOf(h.SrcConnID)
		if id == q.learned {
			continue
		}
		q.learned = id
		q.idLen.Store(int32(id.n))
		s.u.mu.Lock()
		if !s.u.closed {
			s.u.addID(s, id)
		}
		s.u.mu.Unlock()
	}
}

// noteClientID takes the connection ID the client's datagram b is sent
// to, if it is one the session has not seen. A QUIC endpoint moves to new
// IDs its peer issued (RFC 9000, 5.1.2), and those travel encrypted
// (NEW_CONNECTION_ID): the relay learns them as the client starts using
// them, from the address the session knows, so that the client is still
// found if its address changes later. It is called for each datagram of
// a QUIC session, by any of the route's readers.
//
// It returns the session b belongs to: s, or the session of another
// connection that the ID leads to, which then takes s's address. The
// address was s's, but the datagram is another connection's: a NAT gave
// a port it had used for one flow to another client (s is stale), and
// the connection's own session must not lose it to s.
func (s *session) noteClientID(b []byte, now int64) *session {
	q := s.quic
	n := int(q.idLen.Load())
	if n == 0 || len(b) < 1+n || b[0]&0xc0 != 0x40 {
		return s
	}
	id := b[1 : 1+n]
	h := idHash(id)
	if q.lastUsed.Load() == h {
		return s
	}
	owner := s
	u := s.u
	u.mu.Lock()
	if p := s.peer.Load(); !u.closed && u.sessions[p.key()] == s {
		cid := connIDOf(id)
		if o := u.ids.m[cid]; o != nil && o != s {
			u.move(o, *p, now)
			owner = o
		} else {
			u.addID(s, cid)
			q.lastUsed.Store(h)
		}
	}
	u.mu.Unlock()
	return owner
}

// idHash is FNV-1a over a connection ID.
func idHash(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

// addID, with u.mu held, makes id lead to s, unless it leads to another
// session already (the first to claim an ID keeps it, so that a client
// cannot choose an ID to take over another's flow). A session keeps its
// newest maxSessionIDs.
func (u *udpRoute) addID(s *session, id connID) {
	if id.n == 0 {
		return
	}
	if u.ids.m == nil {
		u.ids.m = map[connID]*session{}
	}
	if _, taken := u.ids.m[id]; taken {
		return
	}
	q := s.quic
	if q.n == maxSessionIDs {
		if u.ids.m[q.ids[0]] == s {
			delete(u.ids.m, q.ids[0])
		}
		copy(q.ids[:], q.ids[1:])
		q.n--
	}
	q.ids[q.n] = id
	q.n++
	u.ids.m[id] = s
	u.ids.lens |= 1 << id.n
}

// forgetIDs, with u.mu held, removes the IDs that lead to s.
func (u *udpRoute) forgetIDs(s *session) {
	q := s.quic
	if q == nil {
		return
	}
	for _, id := range q.ids[:q.n] {
		if u.ids.m[id] == s {
			delete(u.ids.m, id)
		}
	}
	q.n = 0
}

// at, with u.mu held, returns the session at a's address, if a belongs
// to it. A QUIC client's Initial packets come from the source ID it chose
// and go to the ID it chose first or, once the target answered (or sent a
// Retry), to the one the target chose. An Initial from the same address
// from another source ID and to an ID that does not lead to the session
// opens another connection: the client of the session has gone, and the
// kernel or a NAT gave its port to a new one (an ephemeral port is soon
// reused: a few hundred clients of one host make a collision likely).
// That session is stale and ends, so that the new connection is balanced,
// or routed by its hello, as any new client is, rather than reaching the
// target of a connection it does not belong to. (Clients that choose
// empty source IDs cannot be told apart this way, and keep the session.)
func (u *udpRoute) at(a *arrival) *session {
	s := u.sessions[a.key()]
	if s == nil || s.quic == nil || !startsConn(a.payload) {
		return s
	}
	h, err := quichello.ParseLong(a.payload)
	if err != nil || connIDOf(h.SrcConnID) == s.quic.clientID || u.ids.m[connIDOf(h.DstConnID)] == s {
		return s
	}
	u.unlink(s)
	s.up.Close() // its goroutine ends, as at a failover
	u.rt.st.udpStale.Add(1)
	return nil
}

// startsConn reports whether b begins with a QUIC v1 or v2 client Initial
// whose destination ID is long enough to be one a client chose (RFC 9000,
// 7.2: at least 8 bytes).
func startsConn(b []byte) bool {
	if len(b) == 0 || b[0]&0xc0 != 0xc0 {
		return false
	}
	h, err := quichello.ParseLong(b)
	return err == nil && h.Type == quichello.TypeInitial && len(h.DstConnID) >= 8
}

// follow, with u.mu held, returns the session whose QUIC connection the
// datagram a from an address without a session belongs to, moved to that
// address and marked used at now; nil if it belongs to none.
func (u *udpRoute) follow(a *arrival, now int64) *session {
	b := a.payload
	if len(u.ids.m) == 0 || len(b) == 0 {
		return nil
	}
	if b[0]&0x40 == 0 { // QUIC's fixed bit (RFC 9000, 17)
		return nil
	}
	var s *session
	if b[0]&0x80 != 0 {
		h, err := quichello.ParseLong(b)
		if err != nil {
			return nil
		}
		s = u.ids.m[connIDOf(h.DstConnID)]
	} else {
		for n := 1; n <= quichello.MaxConnIDLen && s == nil; n++ {
			if u.ids.lens&(1<<n) == 0 {
				continue
			}
			if id, ok := quichello.ShortConnID(b, n); ok {
				s = u.ids.m[connIDOf(id)]
			}
		}
	}
	if s != nil {
		u.move(s, a.peer, now)
	}
	return s
}

// move, with u.mu held, moves s to the client p and marks it used at
// now. A session that held p's address is stale (its client has gone:
// the address now belongs to s's), and ends.
func (u *udpRoute) move(s *session, p peer, now int64) {
	from := s.peer.Load()
	if k := from.key(); u.sessions[k] == s {
		delete(u.sessions, k)
	}
	if old := u.sessions[p.key()]; old != nil && old != s {
		delete(u.sessions, p.key())
		u.forgetIDs(old)
		old.up.Close() // its goroutine ends, as at a failover
	}
	to := &p
	to.proxy = nil
	if from.proxy != nil {
		to.proxy = proxyproto.AppendV2(nil, proxyproto.Datagram, to.who(), dest(s.ln.Load(), to))
	}
	s.peer.Store(to)
	u.sessions[to.key()] = s
	s.touch(now)
	u.rt.st.udpMoved.Add(1)
	u.rt.srv.log.Debug("UDP session follows its QUIC connection to a new address", "route", u.rt.name, "from", from.client, "client", to.client)
}
