package relay

import (
	"fmt"
	"time"
)

// A reload keeps a shared UDP address's sockets, and the sessions of the
// routes that stay on it, as it keeps those of a UDP route alone on its
// address: routes join and leave by a swap of the front's route table.
// An address that becomes shared (a route joins one that was alone on
// it) or stops being shared keeps its sockets too: the route that reads
// them changes, and the sessions of the route that was there go on.

// udpGroups returns the UDP routes of routes that share a front, by
// frontKey, keys in the order of their first route: routes on one
// address, or a lone route with SNI or ALPN.
func udpGroups(routes []Route) (map[string][]Route, []string) {
	m := map[string][]Route{}
	var keys []string
	for _, r := range routes {
		if !r.Listen.Datagram() {
			continue
		}
		k := frontKey(&r)
		if m[k] == nil {
			keys = append(keys, k)
		}
		m[k] = append(m[k], r)
	}
	out := keys[:0]
	for _, k := range keys {
		if g := m[k]; len(g) == 1 && len(g[0].SNI) == 0 && len(g[0].ALPN) == 0 {
			delete(m, k)
			continue
		}
		out = append(out, k)
	}
	return m, out
}

// takeover moves a UDP address's sockets, in commit, from the route that
// reads them to another: from a route alone on its address to a new
// front's socket route, or from a front that ends to its remaining route.
type takeover struct {
	from, to *route
	r        *Route // the listener settings the sockets take
	buf      int    // the sockets' buffer size until then
}

// prepareFronts prepares the fronts of the UDP routes grouped in groups:
// a front kept, a new one taking the sockets of a route that was alone on
// its address (whose name it then adds to kept), or a new one opening its
// own. Each member route is the running one if it stays on its front,
// else a new one.
func (p *plan) prepareFronts(groups map[string][]Route, keys []string, kept map[string]bool) error {
	s := p.s
	for _, k := range keys {
		g := groups[k]
		f := s.udpFronts[k]
		switch {
		case f != nil:
			if err := p.growUDP(f.sock, &g[0]); err != nil {
				return fmt.Errorf("route %q: %w", g[0].Name, err)
			}
		default:
			f = newUDPFront(s, k, g)
			p.undo = append(p.undo, f.sock.targets().close)
			if src := p.alone(g); src != nil {
				if err := p.growUDP(src, &g[0]); err != nil {
					return fmt.Errorf("route %q: %w", g[0].Name, err)
				}
				kept[src.name] = true
				f.sock.udp = &udpRoute{rt: f.sock, sessions: map[sessionKey]*session{}, front: f}
				f.sock.udp.to.Store(&udpAddrs{})
				p.takes = append(p.takes, takeover{src, f.sock, &g[0], src.cfg.Load().UDPBuffer})
				break
			}
			shared, err := p.openUDP(f.sock, kept)
			if err != nil {
				return fmt.Errorf("route %q: %w", g[0].Name, err)
			}
			f.sock.udp.front = f
			p.undoOpen(f.sock, shared)
			p.frontNew[k] = f
		}
		p.udpFronts[k] = f
		for _, r := range g {
			if err := p.member(f, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// alone returns the running route of g, a new front's routes, that is
// alone on its address with sockets the front can take: bound where g
// listens, as many as g's workers need or can be made so.
func (p *plan) alone(g []Route) *route {
	for i := range g {
		old := p.s.routes[g[i].Name]
		if old != nil && old.udp != nil && old.udp.shared == nil && keepsSockets(old, &g[i]) {
			return old
		}
	}
	return nil
}

// member prepares r, a route of f: the running route keeps its sessions
// if it stays on f (or its sockets are the ones f takes); otherwise a new
// route, with the load of the one it replaces, joins f.
func (p *plan) member(f *udpFront, r Route) error {
	old := p.s.routes[r.Name]
	if old != nil && old.udp != nil && (old.udp.shared == f || p.taken(old)) {
		return nil
	}
	var l *load
	if c := p.carry[r.Name]; c != nil {
		l = c.load
	} else if old != nil && old.udp != nil {
		l = old.load
		p.undo = append(p.undo, func() { old.swapTargets(old.cfg.Load()).startChecks(p.s) })
	}
	rt := newRoute(p.s, r, l)
	p.undo = append(p.undo, func() { rt.targets().close() })
	to, err := p.targets[r.Name].get(&r)
	if err != nil {
		return fmt.Errorf("route %q: %w", r.Name, err)
	}
	rt.udp = &udpRoute{rt: rt, sessions: map[sessionKey]*session{}, shared: f}
	rt.udp.to.Store(&to)
	p.udpMembers[r.Name] = rt
	return nil
}

// taken reports whether this plan moves rt's sockets to a front.
func (p *plan) taken(rt *route) bool {
	for _, t := range p.takes {
		if t.from == rt {
			return true
		}
	}
	return false
}

// leavesFront prepares old, a member of a front this reload ends, to
// take the front's sockets as the one route left on its address,
// configured as r; it reports false if old cannot (it moves elsewhere).
func (p *plan) leavesFront(old *route, r *Route) (bool, error) {
	if old == nil || old.udp == nil || old.udp.shared == nil {
		return false, nil
	}
	f := old.udp.shared
	if p.udpFronts[f.key] == f || p.frontTaken[f] || !keepsSockets(f.sock, r) {
		return false, nil
	}
	if err := p.growUDP(f.sock, r); err != nil {
		return false, fmt.Errorf("route %q: %w", r.Name, err)
	}
	p.frontTaken[f] = true
	p.takes = append(p.takes, takeover{f.sock, old, r, f.sock.cfg.Load().UDPBuffer})
	return true, nil
}

// commitFrontsUDP gives each front of the plan its route table and
// sockets: kept fronts take their new workers, and the sockets this plan
// moves change hands, before any old route or front stops.
func (p *plan) commitFrontsUDP(cfg Config, routes map[string]*route) {
	groups, keys := udpGroups(cfg.Routes)
	for _, k := range keys {
		if f := p.udpFronts[k]; p.s.udpFronts[k] == f {
			p.resizeUDP(f.sock)
			sr := sockRoute(k, &groups[k][0])
			f.sock.udp.setBuffers(f.sock.cfg.Load(), &sr)
		}
	}
	for _, t := range p.takes {
		p.resizeUDP(t.from)
		t.to.udp.take(t.from.udp)
		t.to.udp.setBuffers(&Route{UDPBuffer: t.buf}, t.r)
		if t.to.udp.front != nil {
			t.from.udp.shared = t.to.udp.front
		} else {
			t.to.udp.shared = nil
		}
	}
	for _, k := range keys {
		f := p.udpFronts[k]
		var rts []*route
		for _, r := range groups[k] {
			rt := routes[r.Name]
			rt.udp.shared = f
			rts = append(rts, rt)
		}
		sr := sockRoute(k, &groups[k][0])
		f.sock.cfg.Store(&sr)
		t, err := newRouteTable(rts)
		if err != nil { // normalize refused it: not reached
			p.s.log.Error("route table", "err", err)
		}
		f.table.Store(t)
	}
	for _, f := range p.udpFronts {
		first := f.sock.udp.first.Load()
		for _, rt := range f.table.Load().routes {
			rt.udp.first.Store(first)
		}
	}
}

// endFrontsUDP ends the running fronts the plan does not keep: a front
// whose sockets a route took closes empty; another hands its address
// over as a UDP route that moves does. Their routes stop with the
// others the reload removed.
func (p *plan) endFrontsUDP() {
	for k, f := range p.s.udpFronts {
		if p.udpFronts[k] == f {
			continue
		}
		f.hold.close()
		if !p.frontTaken[f] {
			f.sock.handOver(p.heir(f.sock))
		}
		f.close()
	}
	p.s.udpFronts = p.udpFronts
}

// take makes u read the sockets of from, which stops reading them: its
// readers relay what the sockets hold and exit, then u's start. A
// datagram that arrives meanwhile waits in the socket, and the sessions
// go on: their replies leave from the same sockets.
func (u *udpRoute) take(from *udpRoute) {
	for _, ln := range from.lns {
		ln.retire.Store(true)
		ln.SetReadDeadline(time.Unix(1, 0)) // wakes a blocked ReadBatch
	}
	lns := make([]*udpSock, len(from.lns))
	for i, ln := range from.lns {
		<-ln.done
		ln.SetReadDeadline(time.Time{})
		lns[i] = &udpSock{Conn: ln.Conn, done: make(chan struct{})}
	}
	from.lns = nil
	u.lns = lns
	u.first.Store(lns[0].Conn)
	u.serve(lns)
}
