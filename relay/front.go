package relay

import (
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/zeroio/zeroio/internal/tlshello"
)

// DefaultPeekTimeout bounds how long a client of a listen address shared
// by several routes has to send its TLS ClientHello (or its first bytes,
// for the default route) before it is closed.
const DefaultPeekTimeout = 5 * time.Second

// retireGrace is how long a listening socket taken out of a SO_REUSEPORT
// group by a reload keeps accepting before it closes: the kernel already
// sends new clients to the sockets that stay (steer), but a handshake that
// began on the retiring socket completes there, one round trip (and, if a
// SYN-ACK is lost, a retransmission, 1 s) later.
var retireGrace = 2 * time.Second // a variable for tests

// front is a listen address with its listening sockets and the routes
// sharing them. Its table is swapped whole by a reload; an engine reads
// it for each connection.
type front struct {
	srv  *Server
	key  string
	lns  []net.Listener // under srv.mu once serving
	done chan struct{}  // closed by stop

	table    atomic.Pointer[routeTable]
	st       frontCounters
	proxyLog pauseLog // bad PROXY headers (Server.badProxy)

	retiring []*retiring // sockets in their retireGrace, under srv.mu
}

// frontCounters count the clients a front turned away before a route was
// chosen.
type frontCounters struct {
	unmatched, helloTimeout, helloMalformed, helloTooLarge atomic.Uint64
	proxyErrors, untrusted, errAccept                      atomic.Uint64
}

// FrontStats is a snapshot of the counters of one listen address shared
// by several routes (or serving one), for clients turned away before a
// route was chosen.
type FrontStats struct {
	Listen string // the address routes give, with port 0 resolved
	Routes []string
	// Unmatched clients sent a hello (or none) that no route takes.
	Unmatched uint64
	// HelloTimeouts sent no complete ClientHello within the peek
	// timeout; HelloMalformed sent bytes that start as TLS but are not a
	// ClientHello (or ended inside one); HelloTooLarge sent one over the
	// 16 KiB bound.
	HelloTimeouts, HelloMalformed, HelloTooLarge uint64
	// ProxyHeaderErrors and Untrusted count clients refused while the
	// PROXY header was read, before the match.
	ProxyHeaderErrors, Untrusted uint64
	AcceptErrors                 uint64
	// UDP is set for a UDP listen address shared by routes (whose
	// Unmatched clients sent a QUIC ClientHello no route takes, and were
	// dropped; ProxyHeaderErrors and Untrusted count datagrams, and
	// the hello counters above stay zero).
	UDP *UDPFrontStats
}

// frontKey names the front of a stream route: its listen address, or for
// port 0 (a new port each time, never shared) the route itself.
func frontKey(r *Route) string {
	if r.Listen.Network != "unix" && r.Listen.port() == 0 {
		return r.Listen.String() + " route " + r.Name
	}
	return r.Listen.String()
}

// conf returns the listener-level settings of f: those of any of its
// routes, which validation keeps equal.
func (f *front) conf() *Route { return f.table.Load().routes[0].cfg.Load() }

func (f *front) addrs() []net.Addr {
	var as []net.Addr
	for _, ln := range f.lns {
		as = append(as, ln.Addr())
	}
	return as
}

// serve starts an accept loop on each listener from i on.
func (f *front) serve(from int) {
	if h := f.srv.held; h != nil { // a take-over's, until the sender lets go
		*h = append(*h, func() { f.serve(from) })
		return
	}
	for _, ln := range f.lns[from:] {
		f.srv.serveWG.Add(1)
		go f.srv.eng.serve(f, ln)
	}
}

// stop closes f's listeners; accept loops exit, relays go on. It first
// takes what they queued (closeQueued), to be handed over once s.mu
// (held) is free, by a reload or Shutdown, rather than reset by the close.
func (f *front) stop() []queuedConn {
	select {
	case <-f.done:
		return nil
	default:
	}
	close(f.done)
	var queue []queuedConn
	for _, ln := range f.lns {
		for _, c := range closeQueued(ln) {
			queue = append(queue, queuedConn{f, c})
		}
	}
	return append(queue, f.flushRetiring()...)
}

// acceptFailed counts an accept error on f and on each of its routes.
func (f *front) acceptFailed() {
	f.st.errAccept.Add(1)
	for _, rt := range f.table.Load().routes {
		rt.st.errAccept.Add(1)
	}
}

// stats returns f's counters.
func (f *front) stats() FrontStats {
	t := f.table.Load()
	l := t.routes[0].cfg.Load().Listen
	if l.Network != "unix" && l.port() == 0 && len(f.lns) > 0 { // the port it got
		l.Address = f.lns[0].Addr().String()
	}
	fs := FrontStats{
		Listen:    l.String(),
		Unmatched: f.st.unmatched.Load(), HelloTimeouts: f.st.helloTimeout.Load(),
		HelloMalformed: f.st.helloMalformed.Load(), HelloTooLarge: f.st.helloTooLarge.Load(),
		ProxyHeaderErrors: f.st.proxyErrors.Load(), Untrusted: f.st.untrusted.Load(),
		AcceptErrors: f.st.errAccept.Load(),
	}
	for _, rt := range t.routes {
		fs.Routes = append(fs.Routes, rt.name)
	}
	return fs
}

// Hello outcomes that close the client, for the counters and the log.
const (
	helloOK = iota
	helloUnmatched
	helloTimeout
	helloMalformed
	helloTooLarge
	helloClosed // the client closed, or a read failed, before a hello
)

// choose maps what Parse said about a client's first bytes to its route,
// or to the reason it is closed. err is never ErrNeedMore.
func (t *routeTable) choose(h *tlshello.Info, err error) (*route, int) {
	var rt *route
	switch err {
	case nil:
		rt = t.match(h)
	case tlshello.ErrNotTLS:
		rt = t.match(nil)
	case tlshello.ErrTooLarge:
		return nil, helloTooLarge
	default:
		return nil, helloMalformed
	}
	if rt == nil {
		return nil, helloUnmatched
	}
	return rt, helloOK
}

// reject counts a client f closes before choosing a route, and logs it.
func (f *front) reject(why int, client netip.AddrPort, h *tlshello.Info) {
	var c *atomic.Uint64
	var msg string
	switch why {
	case helloUnmatched:
		c, msg = &f.st.unmatched, "no route for client"
	case helloTimeout:
		c, msg = &f.st.helloTimeout, "no ClientHello within the peek timeout"
	case helloMalformed:
		c, msg = &f.st.helloMalformed, "malformed ClientHello"
	case helloTooLarge:
		c, msg = &f.st.helloTooLarge, "ClientHello too large"
	default:
		return
	}
	c.Add(1)
	cs := ""
	if client.IsValid() {
		cs = client.String()
	}
	args := []any{"listen", f.conf().Listen.String(), "client", cs}
	if h != nil && why == helloUnmatched {
		args = append(args, "sni", string(h.ServerName()))
	}
	f.srv.log.Debug(msg, args...)
}

// newFront returns a front for the listeners lns; its table is set by the
// reload that made it.
func newFront(s *Server, key string, lns []net.Listener) *front {
	return &front{srv: s, key: key, lns: lns, done: make(chan struct{})}
}

// retire keeps lns, sockets a reload took out of f's group after steering
// new clients away from them, accepting for retireGrace, then hands over
// what they still queue and closes them. s.mu is held.
func (f *front) retire(lns []net.Listener) {
	r := &retiring{lns: lns}
	r.t = time.AfterFunc(retireGrace, func() {
		s := f.srv
		s.mu.Lock()
		// A Shutdown or reload that stopped the timer too late has
		// closed the sockets already, and an engine that has stopped
		// may no longer be able to close them.
		if r.closed {
			s.mu.Unlock()
			return
		}
		q := r.close(f)
		f.retiring = slices.DeleteFunc(f.retiring, func(x *retiring) bool { return x == r })
		s.serveWG.Add(1) // as Update does for what it hands over
		s.mu.Unlock()
		for _, h := range q {
			s.eng.serveQueued(h.f, h.c)
		}
		s.serveWG.Done()
	})
	f.retiring = append(f.retiring, r)
}

// retiring is a group of sockets in their grace period.
type retiring struct {
	t      *time.Timer
	lns    []net.Listener
	closed bool // under srv.mu
}

// close drains and closes r's sockets, returning what they queued. s.mu
// is held.
func (r *retiring) close(f *front) []queuedConn {
	r.closed = true
	var q []queuedConn
	for _, ln := range r.lns {
		for _, c := range closeQueued(ln) {
			q = append(q, queuedConn{f, c})
		}
	}
	return q
}

// flushRetiring ends the grace of f's retiring sockets now (a reload adds
// sockets, which must not be numbered after them). s.mu is held.
func (f *front) flushRetiring() []queuedConn {
	var q []queuedConn
	for _, r := range f.retiring {
		// Whether or not the timer has fired, the sockets are closed
		// here unless it has closed them: its function may be waiting
		// for s.mu.
		r.t.Stop()
		if !r.closed {
			q = append(q, r.close(f)...)
		}
	}
	f.retiring = nil
	return q
}
