package relay

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// A UDP route's reload loses no datagram. A route whose listen address
// stays keeps its sockets and its sessions; a change of workers adds
// sockets to their SO_REUSEPORT group or retires the surplus ones
// (udpRoute.grow, udpRoute.shrink). A route that moves opens its new
// sockets first, sharing the port with the old ones if it must, and the
// old ones stop only once the new ones are read, relaying what they still
// hold (udpRoute.close).

// prepareUDP opens what cfg's UDP routes need while every running route
// goes on: the sockets of routes that are new or move, and those a kept
// route's higher workers add. Undo closes them.
func (p *plan) prepareUDP(cfg Config) error {
	s := p.s
	groups, keys := udpGroups(cfg.Routes)
	inFront := map[string]bool{}
	for _, g := range groups {
		for _, r := range g {
			inFront[r.Name] = true
		}
	}
	kept := map[string]bool{} // running UDP routes whose sockets stay
	for _, r := range cfg.Routes {
		if old := s.routes[r.Name]; r.Listen.Datagram() && !inFront[r.Name] && old != nil && old.udp != nil && old.udp.shared == nil && keepsSockets(old, &r) {
			kept[r.Name] = true
		}
	}
	if err := p.prepareFronts(groups, keys, kept); err != nil {
		return err
	}
	for _, r := range cfg.Routes {
		if !r.Listen.Datagram() || inFront[r.Name] {
			continue
		}
		old := s.routes[r.Name]
		if kept[r.Name] {
			if err := p.growUDP(old, &r); err != nil {
				return fmt.Errorf("route %q: %w", r.Name, err)
			}
			continue
		}
		ok, err := p.leavesFront(old, &r)
		if err != nil {
			return err
		}
		if ok {
			continue
		}
		var l *load
		if c := p.carry[r.Name]; c != nil {
			l = c.load
		} else if old != nil && old.udp != nil {
			l = old.load
			// newRoute gives the shared load r's target set; the old
			// route goes on with its own if the reload is undone.
			p.undo = append(p.undo, func() { old.swapTargets(old.cfg.Load()).startChecks(s) })
		}
		rt := newRoute(s, r, l)
		shared, err := p.openUDP(rt, kept)
		if err != nil {
			return err
		}
		p.undoOpen(rt, shared)
		p.udpNew[r.Name] = rt
	}
	return nil
}

// undoOpen makes the plan's undo stop rt, whose sockets it opened,
// sharing the port of the routes shared. Undone, the route's readers
// start and stop at once: what its sockets took meanwhile (sharing a
// port) is relayed, once the group they joined gives new datagrams to
// its old sockets only, or, where they are not in that group or it
// cannot be steered, once they have left the kernel's choice as
// handOver's do (a specific address outranks the wildcard until it
// closes).
func (p *plan) undoOpen(rt *route, shared []*route) {
	p.undo = append(p.undo, func() {
		if rt.udp.foreign.Load() { // a take-over's: the sender reads them
			rt.stop()
			return
		}
		unhash := false
		for _, o := range shared {
			if sameGroup(o.udp, rt.udp) && steer(o.udp.lns[0], 0, len(o.udp.lns)) == nil {
				settleSteering()
			} else {
				unhash = true
			}
		}
		if unhash {
			ok := true
			for _, ln := range rt.udp.lns {
				ok = unhashUDP(ln) == nil && ok
			}
			if ok {
				settleSteering()
			}
		}
		rt.udp.serve(rt.udp.lns)
		rt.stop()
	})
}

// keepsSockets reports whether rt's sockets are the ones r asks for: the
// same listen address, or one that names the address they are bound to
// (port 0 made explicit, "udp" or "udp4" for an IPv4 address). Only the
// wildcard's network tells a dual-stack socket from an IPv6-only or an
// IPv4 one.
func keepsSockets(rt *route, r *Route) bool {
	cur := rt.cfg.Load()
	if cur.Listen == r.Listen {
		return true
	}
	la, err := net.ResolveUDPAddr(r.Listen.Network, r.Listen.Address)
	if err != nil || len(rt.udp.lns) == 0 {
		return false
	}
	at := rt.udp.lns[0].LocalAddr().(*net.UDPAddr)
	if la.Port != 0 && la.Port != at.Port {
		return false
	}
	if la.IP == nil || la.IP.IsUnspecified() {
		return r.Listen.Network == cur.Listen.Network && at.IP.IsUnspecified()
	}
	return la.IP.Equal(at.IP)
}

// growUDP prepares a kept UDP route for r's workers: the sockets a larger
// number needs join the group of those there are, which a socket opened
// alone joins once the option is set on it (Linux); a smaller number is
// applied by commit.
func (p *plan) growUDP(rt *route, r *Route) error {
	u := rt.udp
	n := len(u.lns)
	switch {
	case r.Workers > n:
		for _, ln := range u.lns {
			if err := reusePort(ln); err != nil {
				return err
			}
		}
		more, err := openUDPSocks(r, u.lns[0].LocalAddr().String(), r.Workers-n, true)
		if err != nil {
			return err
		}
		// Undone, the sockets join the route and retire at once: what
		// the kernel gave them meanwhile is relayed, not dropped.
		p.undo = append(p.undo, func() { u.grow(more); u.shrink(n) })
		p.udpGrow[rt] = more
	case r.Workers < n:
		p.udpLess[rt] = r.Workers
	}
	return nil
}

// resizeUDP gives a kept UDP route, in commit, the workers prepareUDP
// prepared.
func (p *plan) resizeUDP(rt *route) {
	u := rt.udp
	m, less := p.udpLess[rt]
	more := p.udpGrow[rt]
	delete(p.udpLess, rt) // applied once, by whichever step comes first
	delete(p.udpGrow, rt)
	switch {
	case more != nil:
		u.grow(more)
	case less && u.shrink(m):
	default:
		return
	}
	rt.srv.log.Info("listening", "route", rt.name, "listen", u.lns[0].LocalAddr().String(), "targets", rt.targets().String(), "workers", len(u.lns))
}

// openUDP opens the sockets of rt, a UDP route that is new or moves. If
// its port is held by a running UDP route this reload replaces (a move
// between the wildcard and a specific address of one port, or port 0
// made explicit), the two share the port in SO_REUSEPORT groups until
// the old one stops (Linux); elsewhere the old route stops first, and is
// put back if the reload is undone.
func (p *plan) openUDP(rt *route, kept map[string]bool) (shared []*route, err error) {
	s := p.s
	r := rt.cfg.Load()
	tg := p.targets[r.Name]
	err = rt.openUDP(r, tg, false)
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) {
		return nil, err
	}
	var olds []*route
	for _, name := range s.sortedNames() {
		o := s.routes[name]
		if o.udp != nil && !kept[name] && len(o.udp.lns) > 0 && o.udp.lns[0].LocalAddr().(*net.UDPAddr).Port == r.Listen.port() {
			olds = append(olds, o)
		}
	}
	for k, f := range s.udpFronts { // a shared address this reload ends
		if p.udpFronts[k] != f && !p.frontTaken[f] && len(f.sock.udp.lns) > 0 && f.sock.udp.lns[0].LocalAddr().(*net.UDPAddr).Port == r.Listen.port() {
			olds = append(olds, f.sock)
		}
	}
	if len(olds) == 0 {
		return nil, err
	}
	if reusePortSupported() == nil {
		for _, o := range olds {
			for _, ln := range o.udp.lns {
				if reusePort(ln) != nil {
					return nil, err
				}
			}
		}
		return olds, rt.openUDP(r, tg, true)
	}
	for _, o := range olds {
		if o.udp.front != nil { // restore puts back routes, not fronts
			return nil, err
		}
	}
	for _, o := range olds {
		o.stop()
		p.undo = append(p.undo, func() { s.restore(o) })
	}
	return nil, rt.openUDP(r, tg, false)
}

// sameGroup reports whether u's and v's sockets share an address, and so
// a SO_REUSEPORT group when they share the port: u's first, then v's.
// Not quite always: the kernel groups only sockets alike in IPV6_V6ONLY
// (see handOver).
func sameGroup(u, v *udpRoute) bool {
	return len(u.lns) > 0 && len(v.lns) > 0 && u.lns[0].LocalAddr().String() == v.lns[0].LocalAddr().String()
}

// samePort reports whether u's and v's sockets share a port.
func samePort(u, v *udpRoute) bool {
	return len(u.lns) > 0 && len(v.lns) > 0 && u.lns[0].LocalAddr().(*net.UDPAddr).Port == v.lns[0].LocalAddr().(*net.UDPAddr).Port
}

// heir returns the route that takes over the address of old, a running
// UDP route this reload replaces or removes: the new UDP route whose
// sockets share old's address, or failing that its port (they joined
// old's sockets there, see openUDP), whatever its name; else nil. A
// route of old's name that moved to another port takes nothing over:
// the route that took old's address, if any, is the one whose sockets
// share old's group.
func (p *plan) heir(old *route) *route {
	var port *route
	news := make([]*route, 0, len(p.udpNew)+len(p.frontNew))
	for _, rt := range p.udpNew {
		news = append(news, rt)
	}
	for _, f := range p.frontNew {
		news = append(news, f.sock)
	}
	for _, rt := range news {
		switch {
		case sameGroup(old.udp, rt.udp):
			return rt
		case port == nil && samePort(old.udp, rt.udp):
			port = rt
		}
	}
	return port
}

// handOver stops rt, a UDP route that a reload replaced, moved or
// removed, once next's sockets are read: next is the route that takes
// rt's address over (nil if none does, see heir). If next's sockets
// joined rt's SO_REUSEPORT group (the same address), the kernel is told
// to give new datagrams to them only before rt's sockets stop, so that
// none reaches a socket on its way out; what rt's sockets hold is relayed
// as they stop.
func (rt *route) handOver(next *route) {
	u := rt.udp
	var nu *udpRoute
	if next != nil {
		nu = next.udp
	}
	steered := false
	switch {
	case nu == nil:
	case sameGroup(u, nu) && steer(u.lns[0], len(u.lns), len(nu.lns)) == nil:
		steered = true
		// Each of rt's sockets that closes moves the group's last
		// socket into its place (socket(7)), and the program's
		// indices past the end then fall back to the kernel's hash,
		// which could pick another of rt's sockets whose reader has
		// finished. Connected, as shrink's surplus sockets are, they
		// are skipped (reuseport_select_sock_by_hash passes over
		// connected sockets, and lookups score them for their peer
		// only).
		for _, ln := range u.lns {
			unhashUDP(ln)
		}
		settleSteering()
	case samePort(u, nu):
		// Two groups on one port: the old one may outrank the new for
		// the kernel's lookup until it closes. So may sockets of one
		// address that the kernel did not group, or whose group it
		// refused to steer: a dual-stack socket and an IPv6-only one
		// on [::] are never in one group, and a lone first socket,
		// which had SO_REUSEPORT set only after it was bound, is in
		// none.
		ok := true
		for _, ln := range u.lns {
			ok = unhashUDP(ln) == nil && ok
		}
		if ok {
			settleSteering()
		}
	}
	rt.stop()
	if steered {
		// rt's sockets left the group, and next's took their places.
		steer(nu.lns[0], 0, len(nu.lns))
	}
}

// resolveUDPTargets resolves the targets of cfg's UDP routes that are new
// or changed, before Update takes s.mu: a slow DNS answer must not stall
// accepts, the ends of relays and Stats on every route meanwhile. A route
// whose target is unchanged keeps the address it resolved before.
func (s *Server) resolveUDPTargets(cfg Config) map[string]*resolved {
	cur := map[string]udpAddrs{}
	s.mu.Lock()
	for name, rt := range s.routes {
		if rt.udp != nil {
			cur[name] = *rt.udp.to.Load()
		}
	}
	s.mu.Unlock()
	out := map[string]*resolved{}
	for i := range cfg.Routes {
		r := &cfg.Routes[i]
		if !r.Listen.Datagram() {
			continue
		}
		to, err := resolveTargets(r, cur[r.Name])
		out[r.Name] = &resolved{to, err}
	}
	return out
}

// restore opens again old, a UDP route a failed reload stopped, with its
// settings and load, where it listened before: on the same port if it
// asked for port 0. The address was just freed, so this fails only if
// something else took it meanwhile; then the route is gone until an
// Update adds it again.
func (s *Server) restore(old *route) {
	r := *old.cfg.Load()
	back := newRoute(s, r, old.load)
	if as := old.addrs(); r.Listen.port() == 0 && len(as) > 0 {
		host, _, _ := net.SplitHostPort(r.Listen.Address)
		_, port, _ := net.SplitHostPort(as[0].String())
		r.Listen.Address = net.JoinHostPort(host, port)
	}
	if err := back.openUDP(&r, &resolved{to: *old.udp.to.Load()}, false); err != nil {
		s.log.Error("route stopped by a failed reload, and listening again as before failed; route removed", "route", old.name, "err", err)
		delete(s.routes, old.name)
		return
	}
	back.serve()
	s.routes[old.name] = back
}
