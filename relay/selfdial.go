package relay

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/zeroio/zeroio/udp"
)

// A route whose target is a listen address of the relay itself would
// relay each connection to itself, again and again, until every
// descriptor is used. Config refuses the targets it can see are such
// (checkLoops); a dial that still reaches one of the relay's own
// listeners (another name for this host, an address of another
// interface) is caught when it connects (dialsSelf) and closed; a UDP
// session's socket that would send to one of the relay's own UDP sockets
// is caught when it opens (sendsToSelf).

// checkLoops returns an error for each target of routes that is a listen
// address of one of routes.
func checkLoops(routes []Route) []error {
	var errs []error
	for _, r := range routes {
		for _, t := range r.Targets {
			for _, l := range routes {
				if reaches(t.Addr, l.Listen) {
					errs = append(errs, fmt.Errorf("route %q: target %s is the listen address of route %q: it would relay to itself", r.Name, t.Addr, l.Name))
				}
			}
		}
	}
	return errs
}

// reaches reports whether a dial to target is known to arrive at a
// listener on listen: the same address, or the same port on a listener
// bound to every address (0.0.0.0, ::) and a target on this host
// (loopback or unspecified).
func reaches(target, listen Addr) bool {
	if target.Datagram() != listen.Datagram() || target.Network == "" || listen.Network == "" {
		return false
	}
	if target.Network == "unix" || listen.Network == "unix" {
		return target.Network == listen.Network && target.Address == listen.Address
	}
	tap, err1 := netip.ParseAddrPort(target.Address)
	lap, err2 := netip.ParseAddrPort(listen.Address)
	if err1 != nil || err2 != nil || lap.Port() == 0 || tap.Port() != lap.Port() {
		return false
	}
	ta, la := tap.Addr().Unmap(), lap.Addr().Unmap()
	return ta == la || la.IsUnspecified() && (ta.IsLoopback() || ta.IsUnspecified())
}

// dialsSelf reports whether c, a connection the relay dialled, arrived at
// one of the relay's own stream listeners (selfDialed).
func (s *Server) dialsSelf(c net.Conn) bool {
	return s.selfDialed(addrPort(c.LocalAddr()), addrPort(c.RemoteAddr()))
}

// mayDialSelf reports whether a dial to remote could reach one of the
// relay's own stream listeners: one listens on its port. The common
// case, a port none has, needs no system call to rule out.
func (s *Server) mayDialSelf(remote netip.AddrPort) bool {
	if !remote.IsValid() {
		return false
	}
	for _, l := range *s.ports.Load() {
		if l.Port() == remote.Port() {
			return true
		}
	}
	return false
}

// selfDialed reports whether a stream the relay dialled from local to
// remote arrived at one of its own stream listeners (reachesOwn).
func (s *Server) selfDialed(local, remote netip.AddrPort) bool {
	return reachesOwn(*s.ports.Load(), local, remote)
}

// sendsToSelf reports whether up, a UDP session's socket connected to
// its target, sends to one of the relay's own UDP listening sockets, as
// dialsSelf does for streams: a datagram sent there would come back as a
// new client's, opening a session whose datagrams come back again, until
// the route has no session left.
func (s *Server) sendsToSelf(up *udp.Conn) bool {
	return reachesOwn(*s.udpPorts.Load(), up.AddrPort(), addrPort(up.RemoteAddr()))
}

// reachesOwn reports whether a socket connected from local to remote
// reaches one of the relay's own sockets, bound to ports: it connects
// this host to itself (the two ends share an IP address) on a port one
// of them is bound to, at that address or at every address.
func reachesOwn(ports []netip.AddrPort, local, remote netip.AddrPort) bool {
	if !remote.IsValid() || local.Addr() != remote.Addr() {
		return false
	}
	for _, l := range ports {
		if l.Port() == remote.Port() && (l.Addr().IsUnspecified() || l.Addr() == remote.Addr()) {
			return true
		}
	}
	return false
}

// updatePorts records the addresses of every route's stream listeners,
// for dialsSelf, and of its UDP listening sockets, for sendsToSelf. s.mu
// is held.
func (s *Server) updatePorts() {
	var ports, udpPorts []netip.AddrPort
	for _, f := range s.fronts {
		for _, ln := range f.lns {
			if ap := addrPort(ln.Addr()); ap.IsValid() {
				ports = append(ports, ap)
			}
		}
	}
	for _, rt := range s.routes {
		if rt.udp == nil {
			continue
		}
		for _, ln := range rt.udp.lns {
			udpPorts = append(udpPorts, ln.AddrPort())
		}
	}
	for _, f := range s.udpFronts {
		for _, ln := range f.sock.udp.lns {
			udpPorts = append(udpPorts, ln.AddrPort())
		}
	}
	s.ports.Store(&ports)
	s.udpPorts.Store(&udpPorts)
}

// errLoop is a dial's error when it reached the relay's own listener.
var errLoop = errors.New("relay: the target is one of this relay's own listen addresses")
