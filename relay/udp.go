package relay

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeroio/zeroio/udp"
)

const (
	maxDatagram = 65535 // the largest UDP payload plus headroom; smaller buffers would truncate
	udpBatch    = DefaultUDPBatch
	// maxDrained bounds what a stopping route's reader still relays from
	// its socket, so that a client that keeps sending cannot hold a reload
	// or a shutdown up: more than a default receive buffer holds.
	maxDrained = 1 << 16
)

// udpRoute relays datagrams: one session per client address (and local
// address, see sessionKey), each with its own connected upstream socket.
// With Workers > 1 the route has that many listening sockets in one
// SO_REUSEPORT group, each with its own reader; the kernel hashes each
// client to one of them, and the sessions are shared.
type udpRoute struct {
	rt    *route
	lns   []*udpSock               // under the Server's mu
	first atomic.Pointer[udp.Conn] // lns[0], which a shrink keeps
	to    atomic.Pointer[udpAddrs] // the targets' addresses; Update may change them

	// front is set on the route that reads a shared address's sockets
	// for its routes (udpFront.sock), shared on each of those routes,
	// which have no sockets of their own; both nil on a route alone on
	// its address. Under the Server's mu.
	front, shared *udpFront

	readers  sync.WaitGroup // the run goroutines
	stopping atomic.Bool    // close has begun: readers relay what is queued and exit
	// foreign: another process reads the sockets too (a hand-over under
	// way), so a stopping reader leaves what they queue to it.
	foreign atomic.Bool

	mu       sync.Mutex
	sessions map[sessionKey]*session
	ids      quicIDs // QUIC connection IDs that lead to sessions
	closed   bool

	sockLog  pauseLog // session sockets that would not open (sockFailed)
	proxyLog pauseLog // datagrams dropped for their PROXY header (proxyFailed)
	limitLog pauseLog // datagrams dropped at MaxSessions (dropped)
}

// socks returns the sockets u's sessions reply from: its own, or those
// of the shared address it is routed from. The Server's mu is held.
func (u *udpRoute) socks() []*udpSock {
	if u.shared != nil {
		return u.shared.sock.udp.lns
	}
	return u.lns
}

// udpSock is one of a route's listening sockets, with its reader's state.
type udpSock struct {
	*udp.Conn
	retire atomic.Bool   // the socket leaves the route: its reader drains it and exits
	done   chan struct{} // closed when its reader has exited
}

// update applies a reload's r to the route's sockets: new sessions go to
// r's targets (a session under way keeps its own, so that its client's
// flow goes on), and the listening sockets take r's buffer size. On an
// error nothing has changed.
func (u *udpRoute) update(cur, r *Route, res *resolved) error {
	if !slices.Equal(cur.Targets, r.Targets) {
		to, err := res.get(r)
		if err != nil {
			return err
		}
		u.to.Store(&to)
	}
	u.setBuffers(cur, r)
	return nil
}

// setBuffers gives u's sockets, configured as cur, r's buffer size.
func (u *udpRoute) setBuffers(cur, r *Route) {
	if r.UDPBuffer == cur.UDPBuffer {
		return
	}
	for _, ln := range u.lns {
		err := ln.SetReadBuffer(r.UDPBuffer)
		if err == nil {
			err = ln.SetWriteBuffer(r.UDPBuffer)
		}
		if err != nil {
			u.rt.srv.log.Warn("UDP buffer size unchanged", "route", u.rt.name, "err", err)
		}
	}
}

// listenUDP opens the sockets of a UDP route configured as r. reuse puts
// even a lone socket in a SO_REUSEPORT group, so that it can share its
// port with the sockets of a route it replaces.
func listenUDP(rt *route, r *Route, res *resolved, reuse bool) (*udpRoute, error) {
	to, err := res.get(r)
	if err != nil {
		return nil, err
	}
	if !reuse && r.Workers > 1 && len(rt.srv.inheritedFor(*r)) == 0 {
		if err := checkUnbound(r.Listen.Network, r.Listen.Address); err != nil {
			return nil, err
		}
	}
	u := &udpRoute{rt: rt, sessions: map[sessionKey]*session{}}
	u.to.Store(&to)
	if ins := rt.srv.inheritedFor(*r); len(ins) > 0 {
		u.lns, err = inheritedUDP(r, ins)
		u.foreign.Store(rt.srv.held != nil) // a take-over's: the sender reads them until it lets go
	} else {
		u.lns, err = openUDPSocks(r, r.Listen.Address, r.Workers, reuse || r.Workers > 1)
	}
	if err != nil {
		return nil, err
	}
	u.noteUnresolved()
	u.first.Store(u.lns[0].Conn)
	return u, nil
}

// openUDPSocks opens n listening sockets for r at addr, in one
// SO_REUSEPORT group if reuse is set.
func openUDPSocks(r *Route, addr string, n int, reuse bool) ([]*udpSock, error) {
	la, err := net.ResolveUDPAddr(r.Listen.Network, addr)
	if err != nil {
		return nil, err
	}
	lc, err := listenConfigReuse(reuse)
	if err != nil {
		return nil, err
	}
	addr = la.String()
	var lns []*udpSock
	for range n {
		pc, err := lc.ListenPacket(context.Background(), r.Listen.Network, addr)
		if err != nil {
			closeUDPSocks(lns)
			return nil, err
		}
		addr = pc.LocalAddr().String() // port 0 becomes the port the others share
		ln, err := newUDPSock(r, pc.(*net.UDPConn))
		if err != nil {
			closeUDPSocks(lns)
			return nil, err
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// newUDPSock makes pc, bound, one of r's listening sockets; on an error
// it closes pc.
func newUDPSock(r *Route, pc *net.UDPConn) (*udpSock, error) {
	la := pc.LocalAddr().(*net.UDPAddr)
	// Packet info tells a socket bound to a wildcard address which of
	// the host's addresses a client sent to, so that the reply leaves
	// from it. A socket bound to one address replies from that address
	// anyway, and without the control messages each datagram costs less
	// (a lone reply goes out with sendto(2)).
	ln, err := udp.NewConn(pc, &udp.Options{
		PacketInfo: la.IP == nil || la.IP.IsUnspecified(),
		ReadBuffer: r.UDPBuffer, WriteBuffer: r.UDPBuffer,
	})
	if err != nil {
		pc.Close()
		return nil, err
	}
	return &udpSock{Conn: ln, done: make(chan struct{})}, nil
}

func closeUDPSocks(lns []*udpSock) {
	for _, ln := range lns {
		ln.Close()
	}
}

func (u *udpRoute) addrs() []net.Addr {
	if u.shared != nil {
		return u.shared.addrs()
	}
	as := make([]net.Addr, len(u.lns))
	for i, ln := range u.lns {
		as[i] = ln.LocalAddr()
	}
	return as
}

func (u *udpRoute) closeListeners() { closeUDPSocks(u.lns) }

// serve starts a reader on each of lns.
func (u *udpRoute) serve(lns []*udpSock) {
	for _, ln := range lns {
		u.rt.srv.serveWG.Add(1)
		u.readers.Add(1)
		go u.run(ln)
	}
}

// close stops the route: the readers relay the datagrams their sockets
// still hold (a reload or a stop loses none that had arrived) and exit,
// then every session ends.
func (u *udpRoute) close() {
	u.stopping.Store(true)
	for _, ln := range u.lns {
		ln.SetReadDeadline(time.Unix(1, 0)) // wakes a blocked ReadBatch
	}
	u.readers.Wait()
	u.mu.Lock()
	u.closed = true
	for _, s := range u.sessions {
		s.up.Close()
	}
	u.mu.Unlock()
	u.closeListeners()
}

// run reads client datagrams from ln in batches and forwards each to its
// session's upstream socket, one WriteBatch per session per batch (GSO
// coalesces equal-sized runs).
func (u *udpRoute) run(ln *udpSock) {
	defer u.rt.srv.serveWG.Done()
	defer u.readers.Done()
	defer close(ln.done)
	st := &u.rt.st
	msgs := make([]udp.Message, udpBatch)
	for i := range msgs {
		msgs[i].Buf = make([]byte, maxDatagram)
	}
	sc := &readScratch{sess: make([]*session, 0, udpBatch), out: make([]udp.Message, 0, udpBatch)}
	for {
		n, err := ln.ReadBatch(msgs)
		if n > 0 && err != nil {
			u.relayBatch(ln.Conn, msgs[:n], sc) // read before the error: relayed too
		}
		if err != nil {
			if u.foreign.Load() && u.stopping.Load() {
				return
			}
			if u.stopping.Load() || ln.retire.Load() {
				u.drain(ln.Conn, msgs, sc)
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			st.errAccept.Add(1)
			u.rt.srv.log.Warn("UDP read failed", "route", u.rt.name, "err", err)
			select {
			case <-time.After(10 * time.Millisecond):
			case <-u.rt.done:
				return
			}
			continue
		}
		u.relayBatch(ln.Conn, msgs[:n], sc)
	}
}

// drain relays what ln still holds once the route is stopping: the
// datagrams a ReadBatch left pending and those queued on the socket, up
// to maxDrained, without waiting for more.
func (u *udpRoute) drain(ln *udp.Conn, msgs []udp.Message, sc *readScratch) {
	for done := 0; done < maxDrained; {
		n, err := ln.ReadQueued(msgs)
		if n == 0 || err != nil {
			return
		}
		u.relayBatch(ln, msgs[:n], sc)
		done += n
	}
}

// relayBatch forwards the client datagrams in msgs, read from ln, to their
// sessions, one WriteBatch per session, in the order they came. sc is the
// reader's scratch. A session's datagrams may reach several readers at
// once (a reload steering the sockets of its group), so what a batch
// gathers for a session is the reader's, not the session's.
func (u *udpRoute) relayBatch(ln *udp.Conn, msgs []udp.Message, sc *readScratch) {
	st := &u.rt.st
	now := time.Now().UnixNano()
	r := u.rt.cfg.Load()
	sc.sess, sc.skip = sc.sess[:0], sc.skip[:0]
	for i := range msgs {
		m := &msgs[i]
		var s *session
		skip := 0
		switch {
		case m.Truncated:
			st.udpDropTruncated.Add(1)
		case u.front != nil:
			s, skip = u.front.find(r, ln, m, now)
		case r.AcceptProxy:
			s, skip = u.proxied(r, ln, m, now)
		default:
			a := arrived(m, nil, 0)
			s = u.session(r, ln, &a, now, 1)
		}
		if s != nil && s.quic != nil {
			s = s.noteClientID(m.Buf[skip:m.N], now)
		}
		sc.sess, sc.skip = append(sc.sess, s), append(sc.skip, skip)
	}
	for i, s := range sc.sess {
		if s == nil {
			continue
		}
		for j := i; j < len(sc.sess); j++ {
			if sc.sess[j] == s {
				sc.out = append(sc.out, udp.Message{Buf: msgs[j].Buf[sc.skip[j]:msgs[j].N]})
				sc.sess[j] = nil
			}
		}
		if p := s.peer.Load(); p.proxy != nil {
			sc.prefix(p.proxy)
		}
		if s.u == u {
			u.forward(r, s, sc.out)
		} else { // a session of a route sharing u's sockets
			s.u.forward(s.u.rt.cfg.Load(), s, sc.out)
		}
		clear(sc.out)
		sc.out = sc.out[:0]
	}
	clear(sc.sess)
}

// readScratch is a reader's per-batch scratch: each datagram's session
// and where its payload starts (after a PROXY header), the datagrams of
// one session, and the buffer they are copied into when each must start
// with a PROXY header.
type readScratch struct {
	sess []*session
	skip []int
	out  []udp.Message
	pbuf []byte
}

// prefix puts hdr in front of each datagram of sc.out, copying them one
// after another into sc.pbuf, so that a run of equal sizes still leaves
// as one GSO send from one buffer.
func (sc *readScratch) prefix(hdr []byte) {
	n := 0
	for _, m := range sc.out {
		n += len(hdr) + len(m.Buf)
	}
	if cap(sc.pbuf) < n {
		sc.pbuf = make([]byte, n)
	}
	b := sc.pbuf[:0]
	for i, m := range sc.out {
		start := len(b)
		b = append(append(b, hdr...), m.Buf...)
		sc.out[i].Buf = b[start:len(b):len(b)]
	}
}

// forward sends msgs, the client's datagrams that a batch found s for, to
// the target.
func (u *udpRoute) forward(r *Route, s *session, msgs []udp.Message) {
	st := &u.rt.st
	if s.paced(dirUp) {
		if msgs = s.pace(dirUp, msgs); len(msgs) == 0 {
			return
		}
	}
	sent, err := s.up.WriteAll(msgs)
	if icmpError(err) {
		// An earlier datagram drew an ICMP error (port unreachable,
		// fragmentation needed), and the kernel reports it on this
		// send, which it refused whole: the pending error fails the
		// next call and is cleared by it (sock_error in
		// sock_alloc_send_pskb), so msgs[sent] and those after it were
		// not sent and nothing is known of them. A refusal marks the
		// target down (failover ends the session if another target can
		// take the client); then they go on once: on this socket, or
		// through a new session on another target.
		if refusal(err) {
			s.failover(err)
		}
		var n int
		n, err = s.up.WriteAll(msgs[sent:])
		sent += n
	}
	if errors.Is(err, net.ErrClosed) {
		// s ended after the batch found it: it failed (or failover just
		// ended it), or the route is closing. (It cannot have expired
		// since: finding it marked it used, under the lock its expiry is
		// decided under.) It left the route's sessions before closing
		// its socket, so session opens a new one (unless the route is
		// closing), and the datagrams go on as if they had come a moment
		// later.
		a := arrival{peer: *s.peer.Load()}
		s2 := u.session(r, s.ln.Load(), &a, time.Now().UnixNano(), uint64(len(msgs)-sent))
		if s2 == nil { // dropped, and counted by session under its reason
			st.udpPacketsUp.Add(uint64(sent))
			return
		}
		if s2 != s {
			var n int
			n, err = s2.up.WriteAll(msgs[sent:])
			sent += n
			s = s2 // a refusal now is s2's target's
		}
	}
	st.udpPacketsUp.Add(uint64(sent))
	if err != nil {
		// An error again, on the retry: a datagram too large for the
		// target, or one sent since drew ICMP port unreachable
		// (udp(7)); the rest of the batch is lost, and counted, and
		// after a refusal the client's next datagrams go to another
		// target.
		st.udpDropWrite.Add(uint64(len(msgs) - sent))
		if refusal(err) {
			s.failover(err)
		}
	}
}

// grow adds more, sockets just opened in the SO_REUSEPORT group of u's,
// to the route and starts their readers; the sessions go on. The group's
// steering, if a shrink set it, then covers every socket.
func (u *udpRoute) grow(more []*udpSock) {
	u.serve(more)
	u.lns = append(u.lns, more...)
	if err := steer(u.lns[0], 0, len(u.lns)); err != nil {
		u.rt.srv.log.Debug("UDP sockets not steered; the kernel's hash spreads clients", "route", u.rt.name, "err", err)
	}
}

// shrink retires the sockets of u past the first m, losing no datagram:
// the kernel is told to give new datagrams only to the first m, the
// surplus sockets' readers relay what those still hold and exit, and
// their sessions move to a socket that stays (replies leave from the
// same address). Where the kernel refuses the steering, the surplus
// sockets stay open, since closing them would drop what arrives on them
// meanwhile; shrink reports whether it closed them.
func (u *udpRoute) shrink(m int) bool {
	if err := steer(u.lns[0], 0, m); err != nil {
		u.rt.srv.log.Warn("workers lowered, but the surplus UDP sockets stay open until the address changes: closing them would drop datagrams", "route", u.rt.name, "sockets", len(u.lns), "workers", m, "err", err)
		return false
	}
	settleSteering()
	gone := u.lns[m:]
	u.lns = u.lns[:m:m]
	for _, ln := range gone {
		// Closing a socket of a group leaves it in the kernel's lookup
		// for a moment after it left the group, and a datagram found it
		// then would be dropped with it (udp_lib_unhash detaches it
		// from the group before unlinking it). Connected, it is found
		// by no client.
		unhashUDP(ln)
		ln.retire.Store(true)
		ln.SetReadDeadline(time.Unix(1, 0)) // wakes a blocked ReadBatch
	}
	for _, ln := range gone {
		<-ln.done
	}
	stay := u.lns[0].Conn
	u.mu.Lock()
	for _, s := range u.sessions {
		ln := s.ln.Load()
		for _, g := range gone {
			if ln == g.Conn {
				s.ln.Store(stay)
			}
		}
	}
	u.mu.Unlock()
	closeUDPSocks(gone)
	return true
}
