package relay

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
)

// A reload is prepared, then committed. Preparing does everything that
// can fail (binding new sockets, resolving UDP targets, stopping UDP
// routes whose address the new config binds anew) and can be undone;
// committing only swaps tables and closes what is no longer wanted.

// plan is an Update being applied.
type plan struct {
	s       *Server
	fronts  map[string]*front         // the fronts of the new config: kept or new
	fresh   map[*front]bool           // opened by this plan
	grow    map[*front][]net.Listener // sockets added to kept fronts
	shrink  map[*front]int            // kept fronts to shrink to this many sockets
	udpNew  map[string]*route         // UDP routes opened by this plan
	udpGrow map[*route][]*udpSock     // sockets added to kept UDP routes
	udpLess map[*route]int            // kept UDP routes to shrink to this many sockets
	// Shared UDP addresses (reloadudpfront.go).
	udpFronts  map[string]*udpFront // the fronts of the new config: kept or new
	frontNew   map[string]*udpFront // fronts that open sockets of their own
	frontTaken map[*udpFront]bool   // running fronts whose sockets a route takes
	udpMembers map[string]*route    // new routes of fronts
	takes      []takeover

	undo    []func()
	carry   map[string]*route // for Start: the unopened routes whose load to keep
	targets map[string]*resolved
}

// apply makes cfg the running configuration, all or nothing. s.mu is
// held and s.started set. carry, for Start, holds the routes New made,
// whose load the opened ones keep. It returns the connections that were
// queued on the sockets it closed, to be handed to the engine once s.mu
// is free.
func (s *Server) apply(cfg Config, targets map[string]*resolved, carry map[string]*route) ([]queuedConn, error) {
	p := &plan{
		s: s, fronts: map[string]*front{}, fresh: map[*front]bool{},
		grow: map[*front][]net.Listener{}, shrink: map[*front]int{},
		udpNew: map[string]*route{}, udpGrow: map[*route][]*udpSock{}, udpLess: map[*route]int{},
		udpFronts: map[string]*udpFront{}, frontNew: map[string]*udpFront{}, frontTaken: map[*udpFront]bool{},
		udpMembers: map[string]*route{}, carry: carry, targets: targets,
	}
	if err := p.prepare(cfg); err != nil {
		for i := len(p.undo) - 1; i >= 0; i-- {
			p.undo[i]()
		}
		return nil, err
	}
	return p.commit(cfg), nil
}

// groupFronts returns cfg's stream routes by front key, keys in the
// order of their first route.
func groupFronts(routes []Route) (map[string][]Route, []string) {
	m := map[string][]Route{}
	var keys []string
	for _, r := range routes {
		if r.Listen.Datagram() {
			continue
		}
		k := frontKey(&r)
		if m[k] == nil {
			keys = append(keys, k)
		}
		m[k] = append(m[k], r)
	}
	return m, keys
}

func (p *plan) prepare(cfg Config) error {
	s := p.s
	for _, r := range cfg.Routes {
		if res := p.targets[r.Name]; res != nil && res.err != nil {
			return fmt.Errorf("route %q: %w", r.Name, res.err)
		}
	}
	groups, keys := groupFronts(cfg.Routes)
	for _, k := range keys {
		r := groups[k][0]
		if old := s.fronts[k]; old != nil {
			if err := p.resize(old, &r); err != nil {
				return fmt.Errorf("route %q: %w", r.Name, err)
			}
			p.fronts[k] = old
			continue
		}
		lns, err := p.listen(&r, groups)
		if err != nil {
			return fmt.Errorf("route %q: %w", r.Name, err)
		}
		p.undo = append(p.undo, func() { closeAll(lns) })
		f := newFront(s, k, lns)
		p.fresh[f] = true
		p.fronts[k] = f
	}
	return p.prepareUDP(cfg)
}

// resize prepares a kept front for r's listener settings: the sockets a
// larger Workers needs, or Unix socket file permissions.
func (p *plan) resize(f *front, r *Route) error {
	oc := f.conf()
	if r.Listen.Network == "unix" && (oc.UnixMode != r.UnixMode || oc.own != r.own) {
		if err := p.chmod(r); err != nil {
			return err
		}
	}
	n := len(f.lns)
	switch {
	case r.Workers > n:
		// The sockets there are stay; new ones join them in one
		// SO_REUSEPORT group, which a socket opened alone joins once
		// the option is set on it (Linux).
		for _, ln := range f.lns {
			if err := reusePort(listenerControl(ln)); err != nil {
				return err
			}
		}
		more, err := p.s.adopt(listenStreamAt(r, f.lns[0].Addr().String(), r.Workers-n, true))
		if err != nil {
			return err
		}
		p.undo = append(p.undo, func() { closeAll(more) })
		p.grow[f] = more
	case r.Workers < n:
		p.shrink[f] = r.Workers
	}
	return nil
}

// chmod gives a kept Unix socket file r's mode and owner, and undoes it
// on rollback.
func (p *plan) chmod(r *Route) error {
	path := r.Listen.Address
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if uid, gid, ok := fileOwner(fi); ok {
		p.undo = append(p.undo, func() { os.Lchown(path, uid, gid) })
	}
	mode := fi.Mode().Perm()
	p.undo = append(p.undo, func() { os.Chmod(path, mode) })
	if r.own != nil {
		if err := os.Lchown(path, r.own.uid, r.own.gid); err != nil {
			return err
		}
	}
	if r.UnixMode != 0 {
		return os.Chmod(path, r.UnixMode)
	}
	return nil
}

// listen opens the sockets of a new front for r, or takes the inherited
// ones its routes use (Server.Inherit). If its port is taken by
// a front of ours this reload removes (a route moving between the
// wildcard and a specific address of one port), the two share the port
// in one SO_REUSEPORT group until the old one closes (Linux).
func (p *plan) listen(r *Route, groups map[string][]Route) ([]net.Listener, error) {
	if ins := p.s.inheritedFor(groups[frontKey(r)]...); len(ins) > 0 {
		lns, err := p.s.adopt(listenInherited(r, ins))
		if p.s.held != nil { // a take-over's: the socket file is the sender's until it lets go
			for _, ln := range lns {
				setUnlink(ln, false)
			}
		}
		return lns, err
	}
	lns, err := listenStream(r)
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) || r.Listen.Network == "unix" {
		return p.s.adopt(lns, err)
	}
	shared := false
	for k, f := range p.s.fronts {
		if groups[k] != nil || f.conf().Listen.Network == "unix" || f.boundPort() != r.Listen.port() {
			continue
		}
		for _, ln := range f.lns {
			if reusePort(listenerControl(ln)) != nil {
				return nil, err
			}
		}
		shared = true
	}
	if !shared {
		return nil, err
	}
	return p.s.adopt(listenStreamAt(r, r.Listen.Address, r.Workers, true))
}

// boundPort is the port f listens on: its routes' port, or for port 0
// the one the kernel gave it, which a reload may now name.
func (f *front) boundPort() int {
	if p := f.conf().Listen.port(); p != 0 || len(f.lns) == 0 {
		return p
	}
	if a, ok := f.lns[0].Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// commit makes the prepared plan the running configuration. Nothing in
// it fails.
func (p *plan) commit(cfg Config) []queuedConn {
	s := p.s
	routes := p.commitRoutes(cfg)
	p.commitFrontsUDP(cfg, routes)
	// The UDP routes that replace others read their new sockets before
	// the old ones stop.
	for _, rt := range p.udpNew {
		rt.serve()
	}
	for _, f := range p.frontNew {
		f.sock.udp.serve(f.sock.udp.lns)
	}
	// Shared addresses that end relay what their sockets hold to their
	// routes before those stop.
	p.endFrontsUDP()
	for name, old := range s.routes {
		if old.udp != nil && routes[name] != old {
			old.handOver(p.heir(old))
		}
	}
	for name, rt := range s.routes {
		if routes[name] == nil {
			s.log.Info("route removed", "route", name)
			rt.stop()
			rt.targets().close()
		}
	}
	queue := p.commitFronts(cfg, routes)
	for k, f := range s.fronts {
		if p.fronts[k] != f {
			queue = append(queue, f.stop()...)
		}
	}
	s.fronts = p.fronts
	s.routes = routes
	return queue
}

// commitRoutes returns the routes of cfg by name: each a route kept and
// updated, a UDP route the plan opened, or a new one.
func (p *plan) commitRoutes(cfg Config) map[string]*route {
	s := p.s
	routes := map[string]*route{}
	for _, r := range cfg.Routes {
		old := s.routes[r.Name]
		switch {
		case p.udpNew[r.Name] != nil:
			routes[r.Name] = p.udpNew[r.Name]
		case p.udpMembers[r.Name] != nil:
			rt := p.udpMembers[r.Name]
			rt.targets().startChecks(s)
			routes[r.Name] = rt
		case r.Listen.Datagram():
			old.update(r, p.targets[r.Name]) // resolved beforehand: no error
			routes[r.Name] = old
			p.resizeUDP(old)
		case old != nil && old.udp == nil:
			old.update(r, nil)
			routes[r.Name] = old
		default:
			var l *load
			if c := p.carry[r.Name]; c != nil {
				l = c.load
			}
			rt := newRoute(s, r, l)
			rt.targets().startChecks(s)
			routes[r.Name] = rt
			if p.carry == nil {
				s.log.Info("route added", "route", r.Name, "listen", r.Listen.String(), "targets", rt.targets().String())
			}
		}
	}
	return routes
}

// commitFronts gives each of the plan's fronts its new route table and
// its listeners as planned (opened, grown or shrunk), and returns the
// clients queued on the listeners a shrink retired.
func (p *plan) commitFronts(cfg Config, routes map[string]*route) []queuedConn {
	s := p.s
	var queue []queuedConn
	byKey := map[string][]*route{}
	for _, r := range cfg.Routes {
		if !r.Listen.Datagram() {
			k := frontKey(&r)
			byKey[k] = append(byKey[k], routes[r.Name])
		}
	}
	for k, f := range p.fronts {
		t, err := newRouteTable(byKey[k])
		if err != nil { // normalize refused it: not reached
			s.log.Error("route table", "err", err)
		}
		f.table.Store(t)
		for _, rt := range byKey[k] {
			rt.front = f
		}
		_, shrinks := p.shrink[f]
		switch more := p.grow[f]; {
		case p.fresh[f]:
			f.serve(0)
		case more != nil:
			queue = append(queue, f.flushRetiring()...)
			n := len(f.lns)
			f.lns = append(f.lns, more...)
			steer(listenerControl(f.lns[0]), 0, len(f.lns))
			f.serve(n)
		case shrinks:
			p.shrinkFront(f, p.shrink[f])
		}
		if p.fresh[f] || p.grow[f] != nil || shrinks {
			for _, rt := range t.routes {
				s.log.Info("listening", "route", rt.name, "listen", f.lns[0].Addr().String(), "targets", rt.targets().String(), "workers", len(f.lns))
			}
		}
	}
	return queue
}

// shrinkFront retires f's listeners past the first m. Closing a socket of
// the group resets the handshakes in flight on it, unless new clients
// were steered away first, or the kernel migrates them
// (tcp_migrate_req). Failing both, the surplus sockets stay: a reload
// loses no client.
func (p *plan) shrinkFront(f *front, m int) {
	if err := steer(listenerControl(f.lns[0]), 0, m); err != nil && !migrateReq() {
		p.s.log.Warn("workers lowered, but the surplus sockets stay open until the address changes: closing them would reset clients connecting", "listen", f.lns[0].Addr().String(), "sockets", len(f.lns), "workers", m, "err", err)
		return
	}
	f.retire(f.lns[m:])
	f.lns = f.lns[:m]
}
