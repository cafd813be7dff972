package relay

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
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
	rt  *route
	lns []*udp.Conn
	to  atomic.Pointer[udpAddrs] // the targets' addresses; Update may change them

	readers  sync.WaitGroup // the run goroutines
	stopping atomic.Bool    // close has begun: readers relay what is queued and exit

	mu       sync.Mutex
	sessions map[sessionKey]*session
	closed   bool
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
	if r.UDPBuffer != cur.UDPBuffer {
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
	return nil
}

func listenUDP(rt *route, r *Route, res *resolved) (*udpRoute, error) {
	to, err := res.get(r)
	if err != nil {
		return nil, err
	}
	la, err := net.ResolveUDPAddr(r.Listen.Network, r.Listen.Address)
	if err != nil {
		return nil, err
	}
	lc, err := listenConfig(r)
	if err != nil {
		return nil, err
	}
	u := &udpRoute{rt: rt, sessions: map[sessionKey]*session{}}
	u.to.Store(&to)
	addr := la.String()
	for range r.Workers {
		pc, err := lc.ListenPacket(context.Background(), r.Listen.Network, addr)
		if err != nil {
			u.closeListeners()
			return nil, err
		}
		addr = pc.LocalAddr().String() // port 0 becomes the port the others share
		// Packet info tells a socket bound to a wildcard address which
		// of the host's addresses a client sent to, so that the reply
		// leaves from it. A socket bound to one address replies from
		// that address anyway, and without the control messages each
		// datagram costs less (a lone reply goes out with sendto(2)).
		ln, err := udp.NewConn(pc.(*net.UDPConn), &udp.Options{
			PacketInfo: la.IP == nil || la.IP.IsUnspecified(),
			ReadBuffer: r.UDPBuffer, WriteBuffer: r.UDPBuffer,
		})
		if err != nil {
			pc.Close()
			u.closeListeners()
			return nil, err
		}
		u.lns = append(u.lns, ln)
	}
	return u, nil
}

func (u *udpRoute) addrs() []net.Addr {
	as := make([]net.Addr, len(u.lns))
	for i, ln := range u.lns {
		as[i] = ln.LocalAddr()
	}
	return as
}

func (u *udpRoute) closeListeners() {
	for _, ln := range u.lns {
		ln.Close()
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
func (u *udpRoute) run(ln *udp.Conn) {
	defer u.rt.srv.serveWG.Done()
	defer u.readers.Done()
	st := &u.rt.st
	msgs := make([]udp.Message, udpBatch)
	for i := range msgs {
		msgs[i].Buf = make([]byte, maxDatagram)
	}
	var touched []*session
	for {
		n, err := ln.ReadBatch(msgs)
		if err != nil {
			if u.stopping.Load() {
				u.drain(ln, msgs, touched)
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
		touched = u.relayBatch(ln, msgs[:n], touched)
	}
}

// drain relays what ln still holds once the route is stopping: the
// datagrams a ReadBatch left pending and those queued on the socket, up
// to maxDrained, without waiting for more.
func (u *udpRoute) drain(ln *udp.Conn, msgs []udp.Message, touched []*session) {
	for done := 0; done < maxDrained; {
		n, err := ln.ReadQueued(msgs)
		if n == 0 || err != nil {
			return
		}
		touched = u.relayBatch(ln, msgs[:n], touched)
		done += n
	}
}

// relayBatch forwards the client datagrams in msgs, read from ln, to their
// sessions, one WriteBatch per session. touched is scratch, returned for
// reuse.
func (u *udpRoute) relayBatch(ln *udp.Conn, msgs []udp.Message, touched []*session) []*session {
	st := &u.rt.st
	now := time.Now().UnixNano()
	r := u.rt.cfg.Load()
	for i := range msgs {
		m := &msgs[i]
		if m.Truncated {
			st.udpDropTruncated.Add(1)
			continue
		}
		s := u.session(r, ln, m, now, 1)
		if s == nil {
			continue
		}
		if len(s.out) == 0 {
			touched = append(touched, s)
		}
		s.out = append(s.out, udp.Message{Buf: m.Buf[:m.N]})
	}
	for _, s := range touched {
		u.forward(r, s, s.out)
		clear(s.out)
		s.out = s.out[:0]
	}
	clear(touched)
	return touched[:0]
}

// forward sends msgs, the client's datagrams that a batch found s for, to
// the target.
func (u *udpRoute) forward(r *Route, s *session, msgs []udp.Message) {
	st := &u.rt.st
	sent, err := s.up.WriteAll(msgs)
	if errors.Is(err, net.ErrClosed) {
		// s ended after the batch found it: it failed, or the route is
		// closing. (It cannot have expired since: finding it marked it
		// used, under the lock its expiry is decided under.) It left the
		// route's sessions before closing its socket, so session opens a
		// new one (unless the route is closing), and the datagrams go on
		// as if they had come a moment later.
		m := udp.Message{Addr: s.client, Local: s.local, IfIndex: s.ifidx}
		s2 := u.session(r, s.ln, &m, time.Now().UnixNano(), uint64(len(msgs)-sent))
		if s2 == nil { // dropped, and counted by session under its reason
			st.udpPacketsUp.Add(uint64(sent))
			return
		}
		if s2 != s {
			var n int
			n, err = s2.up.WriteAll(msgs[sent:])
			sent += n
		}
	}
	st.udpPacketsUp.Add(uint64(sent))
	if err != nil {
		// ECONNREFUSED: an earlier datagram drew ICMP port unreachable
		// from the target (udp(7)); the rest of the batch is lost, and
		// counted, and the client's next datagrams go to another target.
		st.udpDropWrite.Add(uint64(len(msgs) - sent))
		if errors.Is(err, syscall.ECONNREFUSED) {
			s.failover(err)
		}
	}
}
