package relay

import (
	"net"
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

// serve accepts on ln, pausing at a limit with the clients in the listen
// backlog (waitRoom), and serves each client.
func (e *goroutineEngine) serve(f *front, ln net.Listener) {
	defer f.srv.serveWG.Done()
	f.acceptEach(ln, f.waitRoom, func(c net.Conn) { e.serveFront(f, c, f.done) })
}

// serveQueued serves c, taken from the accept queue of a listener of f that a
// reload closed. It was waiting for a slot there, if at a limit, so it
// waits for one as an accepted client does, rather than being closed as
// over the limit (for a hello's server slot, until Shutdown, f having
// stopped): on a goroutine of its own, counted in serveWG as an accept
// loop is, since the reload does not wait.
func (e *goroutineEngine) serveQueued(f *front, c net.Conn) {
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

// serveFront serves a client of f: at once by the only route of a front
// that needs no hello, else on a goroutine that reads the hello first.
// With a done channel, a client over a limit waits for a slot rather
// than being closed, until its route stops or, for a hello's server
// slot, until done closes.
func (e *goroutineEngine) serveFront(f *front, c net.Conn, done <-chan struct{}) {
	p := &pair{e: e, client: c}
	p.id = e.s.newStreamID()
	p.start = mono()
	p.src, p.dst, p.dstKnown = addrPort(c.RemoteAddr()), addrPort(c.LocalAddr()), true
	t := f.table.Load()
	if !t.needsHello() {
		rt := t.only()
		rt.st.accepted.Add(1)
		e.serveConn(p, rt, done != nil)
		return
	}
	p.front, p.cfg = f, t.routes[0].cfg.Load()
	// The hello's wait holds a server slot (admitPeek): at the limit
	// the accept loop waits here, as serveConn's waitTake does.
	s := f.srv
	if !s.admitPeek() && !(done != nil && s.waitPeek(done)) {
		c.Close()
		return
	}
	p.peekSlot = true
	p.publish()
	if !e.track(p) {
		p.release()
		c.Close()
		return
	}
	s.connWG.Add(1)
	go p.runFront(t)
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
func (p *pair) runFront(t *routeTable) {
	if rt := p.readHello(t); rt != nil {
		// The route takes over the server slot the hello held; over
		// the route's limit, the client waits for a slot.
		if p.waitTake(rt) {
			p.publish()
			p.run()
			return
		}
		rt.st.overLimit.Add(1)
	}
	p.client.Close()
	p.release()
	p.e.untrack(p)
	p.e.s.connWG.Done()
}

// serveConn relays p, a client of rt, if its limits and the server let
// it in; with wait, it waits for a slot (the accept loop pausing
// meanwhile) rather than close it.
func (e *goroutineEngine) serveConn(p *pair, rt *route, wait bool) {
	if !p.take(rt) && !(wait && p.waitTake(rt)) {
		rt.st.overLimit.Add(1)
		p.client.Close()
		return
	}
	p.publish()
	if !e.track(p) {
		p.release()
		p.client.Close()
		return
	}
	rt.srv.connWG.Add(1)
	go p.run()
}

// waitTake takes a slot of rt for p (stream.take), waiting while the
// limits are full: the client waits rather than being dropped. It
// returns false when rt stops first; a hello's server slot is still
// held then.
func (p *pair) waitTake(rt *route) bool {
	for !p.take(rt) {
		if !rt.srv.pause(rt, rt.done, nil) {
			return false
		}
	}
	return true
}

func (e *goroutineEngine) track(p *pair) bool {
	s := e.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sealed {
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
