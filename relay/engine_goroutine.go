package relay

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zeroio/zeroio/internal/proxyproto"
)

// goroutineEngine is the portable engine: a goroutine accepts on each
// listener, and each connection is relayed by goroutines of its own that
// block in the netpoller (package net), one per direction.
type goroutineEngine struct {
	s     *Server
	conns map[*pair]struct{} // connections in flight, under s.mu
}

func newGoroutineEngine(s *Server) *goroutineEngine {
	return &goroutineEngine{s: s, conns: map[*pair]struct{}{}}
}

func (e *goroutineEngine) adopt(lns []net.Listener) ([]net.Listener, error) { return lns, nil }

func (e *goroutineEngine) serve(f *front, ln net.Listener) { e.acceptLoop(f, ln) }

// handoff serves c, taken from the accept queue of a listener of f that a
// reload closed. It was waiting for a slot there, if at a limit, so it
// waits for one as an accepted client does, rather than being closed as
// over the limit (for a hello's server slot, until Shutdown, f having
// stopped): on a goroutine of its own, counted in serveWG as an accept
// loop is, since the reload does not wait.
func (e *goroutineEngine) handoff(f *front, c net.Conn) {
	s := f.srv
	s.serveWG.Add(1)
	go func() {
		defer s.serveWG.Done()
		e.serveFront(f, c, s.stopping)
	}()
}

// abort closes every connection in flight; s.mu is held.
func (e *goroutineEngine) abort(why error) {
	for p := range e.conns {
		p.abort(why)
	}
}

func (e *goroutineEngine) close() {}

// inFlight lists the connections in flight; s.mu is held.
func (e *goroutineEngine) inFlight() []connInfo {
	var cs []connInfo
	for p := range e.conns {
		p.mu.Lock()
		ci := connInfo{client: fdOf(p.client), target: -1, dialing: p.cancel != nil && p.target == nil}
		if p.target != nil {
			ci.target = fdOf(p.target)
		}
		p.mu.Unlock()
		cs = append(cs, ci)
	}
	return cs
}

// holding is not known here: the copies' pipes and buffers are package
// splice's (splice.ReadStats).
func (e *goroutineEngine) holding() (bufs, pipes, pipesTaken int64, ok bool) { return 0, 0, 0, false }

func (e *goroutineEngine) loopLoads() []int64 { return nil }

func (e *goroutineEngine) handedOver() int64 { return 0 }

// fdOf returns c's descriptor, or -1.
func fdOf(c net.Conn) int {
	fd := -1
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			rc.Control(func(f uintptr) { fd = int(f) })
		}
	}
	return fd
}

// acceptLoop serves one listener until it is closed.
func (e *goroutineEngine) acceptLoop(f *front, ln net.Listener) {
	defer f.srv.serveWG.Done()
	bo := backoff{listen: ln.Addr().String()}
	for {
		// Room first: at a limit, clients wait in the listen backlog.
		if !f.waitRoom() {
			return
		}
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			f.acceptFailed()
			// Out of descriptors (EMFILE, ENFILE) or memory: every retry
			// fails the same way until a connection closes.
			select {
			case <-time.After(bo.failed(f.srv.log, err)):
			case <-f.done:
				return
			}
			continue
		}
		bo.ok(f.srv.log)
		e.serveFront(f, c, f.done)
	}
}

// serveFront serves a client of f: at once by the only route of a front
// that needs no hello, else on a goroutine that reads the hello first.
// With a done channel, a client over a limit waits for a slot rather
// than being closed, until its route stops or, for a hello's server
// slot, until done closes.
func (e *goroutineEngine) serveFront(f *front, c net.Conn, done <-chan struct{}) {
	t := f.table.Load()
	if !t.needsHello() {
		e.serveConn(t.only(), c, done != nil)
		return
	}
	// The hello's wait holds a server slot (admitPeek): at the limit
	// the accept loop waits here, as serveConn's waitAdmit does.
	s := f.srv
	if !s.admitPeek() && !(done != nil && s.waitPeek(done)) {
		c.Close()
		return
	}
	p := &pair{e: e, client: c, start: time.Now()}
	if !e.track(p) {
		s.unpeek()
		c.Close()
		return
	}
	s.connWG.Add(1)
	go p.runFront(f, t)
}

// waitPeek takes a server slot for a client whose route its hello will
// choose, waiting while the server is at its limit; false when done
// closes first.
func (s *Server) waitPeek(done <-chan struct{}) bool {
	for !s.admitPeek() {
		if !s.pause(nil, done, nil) {
			return false
		}
	}
	return true
}

// runFront reads the client's PROXY header and hello, chooses its route,
// and relays it there under that route's limits.
func (p *pair) runFront(f *front, t *routeTable) {
	rt := f.readHello(p.client, t, &p.pk)
	if rt != nil {
		rt.st.accepted.Add(1)
		// The route takes over the server slot the hello held; over
		// the route's limit, the client waits for a slot.
		if rt.waitAdmitHeld() {
			p.rt, p.cfg = rt, rt.cfg.Load()
			p.run()
			return
		}
		rt.st.overLimit.Add(1)
		p.client.Close()
	}
	f.srv.unpeek()
	p.e.untrack(p)
	f.srv.connWG.Done()
}

// serveConn relays an accepted connection under the route's current
// settings, if its limits and the server let it in; with wait, it waits
// for a slot (the accept loop pausing meanwhile) rather than close it.
func (e *goroutineEngine) serveConn(rt *route, c net.Conn, wait bool) {
	rt.st.accepted.Add(1)
	if !rt.admit(rt.cfg.Load()) && !(wait && rt.waitAdmit()) {
		rt.st.overLimit.Add(1)
		c.Close()
		return
	}
	r := rt.cfg.Load()
	p := &pair{e: e, rt: rt, cfg: r, client: c, start: time.Now()}
	if !e.track(p) {
		rt.release(p)
		c.Close()
		return
	}
	rt.srv.connWG.Add(1)
	go p.run()
}

// admit takes a slot under the global and per-route limits.
func (rt *route) admit(r *Route) bool {
	s := rt.srv
	n := s.active.Add(1)
	m := rt.active.Add(1)
	if lim := s.limit(); (lim > 0 && n > lim) || (r.MaxConns > 0 && m > int64(r.MaxConns)) {
		s.active.Add(-1)
		rt.active.Add(-1)
		return false
	}
	return true
}

func (rt *route) release(p *pair) { rt.releaseSlots(p.perClient, p.clientIP) }

// releaseSlots gives back a connection's slots under the global and
// route limits (waking accept loops paused there) and, if perClient,
// ip's under the per-client limit.
func (rt *route) releaseSlots(perClient bool, ip netip.Addr) {
	rt.unadmit()
	if perClient {
		rt.clientMu.Lock()
		if rt.clients[ip]--; rt.clients[ip] <= 0 {
			delete(rt.clients, ip)
		}
		rt.clientMu.Unlock()
	}
}

// admitClient takes a slot for p.clientIP, if the route limits clients,
// and records in p whether it did: Update may change the limit while p
// runs, and release must give back only what was taken.
func (rt *route) admitClient(p *pair) bool {
	ok, took := rt.takeClient(p.cfg, p.clientIP)
	p.perClient = took
	return ok
}

// takeClient takes a slot for ip under r's per-client limit, if r has
// one. It reports whether ip may connect, and whether a slot was taken.
func (rt *route) takeClient(r *Route, ip netip.Addr) (ok, took bool) {
	if r.MaxConnsPerClient <= 0 || !ip.IsValid() {
		return true, false
	}
	rt.clientMu.Lock()
	defer rt.clientMu.Unlock()
	if rt.clients[ip] >= r.MaxConnsPerClient {
		return false, false
	}
	rt.clients[ip]++
	return true, true
}

// pair is one relayed stream connection: client and target.
type pair struct {
	e         *goroutineEngine
	rt        *route
	cfg       *Route
	client    net.Conn
	target    net.Conn
	clientIP  netip.Addr // the client's address, from a PROXY header if any
	perClient bool       // clientIP took a slot under MaxConnsPerClient
	src       netip.AddrPort
	b         *backend  // the target dialled
	start     time.Time // accepted
	pk        peeked    // what the front read before choosing the route
	up, down  uint64    // bytes each way, each written by its half only
	endFirst  endReason // the side whose EOF came first: endClientClosed or endTargetClosed

	mu      sync.Mutex
	aborted bool
	why     error
	cancel  context.CancelFunc // ends the dial to the target
	last    atomic.Int64       // unix nanoseconds of the last chunk moved
	timer   *time.Timer
}

var errIdle = errors.New("relay: idle timeout")

func addrPort(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case *net.UDPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

// run serves an accepted connection: connect sets it up, then the relay
// runs on a goroutine of its own. connect's frame is large (1.6 KB: the
// dialer, the PROXY header buffers); with the copy waiting below it, a
// direction needed an 8 KiB stack for as long as the connection lived. On
// a fresh goroutine each direction waits in the initial 4 KiB stack, which
// is what an idle connection costs (the relay idle benchmark measures the
// RSS per connection).
func (p *pair) run() {
	if !p.connect() {
		p.end()
		return
	}
	go func() {
		p.relay()
		p.end()
	}()
}

// end gives back what the pair held: its slots under the limits and its
// place among the server's connections.
func (p *pair) end() {
	p.rt.release(p)
	p.e.untrack(p)
	p.rt.srv.connWG.Done()
}

// connect applies the route's policy to the client (PROXY header, access
// lists, per-client limit) and dials the target. It reports whether to
// relay; if not, it has closed what it opened.
func (p *pair) connect() bool {
	src, dst, ok := p.policy()
	if !ok {
		p.client.Close()
		return false
	}
	t, ok := p.dial(src)
	if !ok {
		return false
	}
	if err := p.prelude(t, src, dst); err != nil {
		// The target reset before its first bytes: the relay ends as
		// one a reset ends later does, in the target's counters (its
		// active count given back) and the connection log.
		rt := p.rt
		p.client.Close()
		t.Close()
		rt.st.errCopy.Add(1)
		rt.st.relayed.Add(1)
		p.b.connEnd(p.up, 0)
		rt.logEnd(src, p.b, p.up, 0, p.start, endReset)
		return false
	}
	p.rt.srv.log.Debug("relaying", "route", p.rt.name, "client", src)
	return true
}

// policy applies the route's policy to the client: the PROXY header
// (unless the front read it), the access lists and the per-client limit.
// It returns the client's address and the one it connected to, as the
// header gives them if there is one; on false the caller closes the
// client.
func (p *pair) policy() (src, dst netip.AddrPort, ok bool) {
	rt, r := p.rt, p.cfg
	log := rt.srv.log
	setKeepAlive(p.client, r.KeepAlive)
	src = addrPort(p.client.RemoteAddr())
	dst = addrPort(p.client.LocalAddr())
	if r.AcceptProxy && !p.pk.proxied {
		if len(r.TrustedProxies) > 0 && (!src.IsValid() || !contains(r.TrustedProxies, src.Addr())) {
			rt.st.denied.Add(1)
			log.Debug("untrusted PROXY peer", "route", rt.name, "client", src)
			return src, dst, false
		}
		p.client.SetReadDeadline(time.Now().Add(r.ProxyHeaderTimeout))
		h, err := proxyproto.ReadHeader(p.client)
		p.client.SetReadDeadline(time.Time{})
		if err != nil {
			if !p.isAborted() { // else Close or the shutdown deadline closed the client
				rt.st.errProxy.Add(1)
				rt.srv.badProxy(&rt.proxyLog, "route", rt.name, src, err)
			}
			return src, dst, false
		}
		p.pk.proxied, p.pk.hdr = true, h
	}
	if h := &p.pk.hdr; p.pk.proxied && h.Command == proxyproto.Proxy && h.Source.IsValid() {
		src, dst = unmapHeader(h.Source, h.Destination)
	}
	if !allowed(r.Allow, r.Deny, src.Addr()) {
		rt.st.denied.Add(1)
		log.Debug("client denied", "route", rt.name, "client", src)
		return src, dst, false
	}
	p.clientIP = src.Addr()
	if !rt.admitClient(p) {
		rt.st.overLimit.Add(1)
		log.Debug("client over its connection limit", "route", rt.name, "client", src)
		return src, dst, false
	}
	return src, dst, true
}

// dial connects to one of the route's targets (dialTarget). abort
// cancels the dial, so that Close and Shutdown's deadline do not wait out
// DialTimeout for a target that does not answer. On false it has closed
// what it opened.
func (p *pair) dial(src netip.AddrPort) (net.Conn, bool) {
	rt := p.rt
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.mu.Lock()
	p.cancel = cancel
	aborted := p.aborted
	p.mu.Unlock()
	if aborted { // Shutdown closed the client already
		return nil, false
	}
	p.src = src
	t, b, err := rt.dialTarget(ctx, p.cfg, p.clientIP)
	p.mu.Lock()
	aborted = p.aborted
	if err == nil && !aborted { // else nothing is relayed to b
		p.target, p.b = t, b
		b.connStart()
	}
	p.mu.Unlock()
	if aborted { // Shutdown closed the client while we dialed
		if t != nil {
			t.Close()
		}
		return nil, false
	}
	if err != nil {
		rt.st.errDial.Add(1)
		rt.logEnd(src, nil, 0, 0, p.start, endNoTarget)
		p.client.Close()
		return nil, false
	}
	return t, true
}

// prelude sets Nagle if asked and writes to the target what goes before
// the client's bytes: the PROXY header, then the bytes read to choose
// the route (the ClientHello, and what came with it), unchanged.
func (p *pair) prelude(t net.Conn, src, dst netip.AddrPort) error {
	r := p.cfg
	if r.Nagle {
		setNoDelay(p.client, false)
		setNoDelay(t, false)
	}
	if r.SendProxy != 0 {
		var hdr []byte
		if r.SendProxy == 1 {
			hdr = proxyproto.AppendV1(make([]byte, 0, 108), src, dst)
		} else {
			hdr = proxyproto.AppendV2(make([]byte, 0, 52), proxyproto.Stream, src, dst)
		}
		if _, err := t.Write(hdr); err != nil {
			return err
		}
	}
	if len(p.pk.pre) > 0 {
		n, err := t.Write(p.pk.pre)
		p.rt.st.bytesUp.Add(uint64(n))
		p.up += uint64(n)
		p.pk.pre = nil
		return err
	}
	return nil
}

func (e *goroutineEngine) track(p *pair) bool {
	s := e.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	e.conns[p] = struct{}{}
	return true
}

func (e *goroutineEngine) untrack(p *pair) {
	e.s.mu.Lock()
	delete(e.conns, p)
	e.s.mu.Unlock()
}
