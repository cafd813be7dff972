package relay

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// inherited is a socket the Server was given by [Server.Inherit] rather
// than one it bound: a listening TCP or Unix stream socket, or a UDP
// socket. The Server keeps f open until it shuts down, so that a route a
// reload removes and a later one brings back finds the socket again;
// each route that uses it takes a duplicate.
type inherited struct {
	f     *os.File
	fd    int    // its number in this process, for messages
	name  string // a name given with it (LISTEN_FDNAMES), matched against route names
	proto string // "tcp", "udp" or "unix"
	addr  net.Addr
}

func (in *inherited) String() string {
	if in.name != "" {
		return fmt.Sprintf("fd %d %q (%s %s)", in.fd, in.name, in.proto, in.addr)
	}
	return fmt.Sprintf("fd %d (%s %s)", in.fd, in.proto, in.addr)
}

// Inherit gives s sockets to use instead of binding: those of systemd's
// socket activation (sd_listen_fds(3)), or those a process hands over to
// its successor. Each file is a listening TCP or Unix stream socket or a
// bound UDP socket; names, which may be shorter than files or nil, gives
// each a name (LISTEN_FDNAMES).
//
// A route uses the inherited sockets that match it: a socket named after
// the route, or one of the same protocol (TCP, UDP, Unix stream) and the
// same local address, where the wildcard of either family matches the
// route's 0.0.0.0 or [::] (tcp4 and udp4 ask for an IPv4 socket, tcp6
// and udp6 for an IPv6 one) and a Unix path matches its cleaned form. A
// route with several Workers takes every matching socket into its
// SO_REUSEPORT group and binds the rest of its workers beside them (the
// option is set on the inherited ones; Linux). An inherited Unix socket
// keeps the mode and owner it has: UnixMode, UnixUser and UnixGroup
// apply when a reload changes them.
//
// Inherit must be called before [Server.Start], which fails with an
// error naming every inherited socket no route matches. The Server owns
// the files once Inherit returns nil (on an error the caller keeps them)
// and closes them on Shutdown or Close; a reload keeps using them as it
// keeps sockets it bound.
func (s *Server) Inherit(files []*os.File, names []string) error {
	var ins []*inherited
	for i, f := range files {
		in, err := inspectInherited(f)
		if err != nil {
			return fmt.Errorf("relay: inherited %w", err)
		}
		if i < len(names) {
			in.name = names[i]
		}
		ins = append(ins, in)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrServerClosed
	case s.started:
		return errors.New("relay: Inherit called after Start")
	}
	s.inherited = append(s.inherited, ins...)
	return nil
}

// inspectInherited finds what f is: a listening stream socket, or a UDP
// socket.
func inspectInherited(f *os.File) (*inherited, error) {
	in := &inherited{f: f, fd: -1}
	if rc, err := f.SyscallConn(); err == nil {
		// Control, unlike Fd, leaves the socket non-blocking.
		rc.Control(func(fd uintptr) { in.fd = int(fd) })
	}
	if ln, err := net.FileListener(f); err == nil {
		in.addr = ln.Addr()
		lerr := checkListening(ln)
		ln.Close()
		switch in.proto = in.addr.Network(); {
		case lerr != nil:
			return nil, fmt.Errorf("%v: %w", in, lerr)
		case in.proto != "tcp" && in.proto != "unix":
			return nil, fmt.Errorf("%v: not a TCP or Unix stream socket", in)
		}
		return in, nil
	}
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, fmt.Errorf("fd %d %s: not a socket a route can use: %w", in.fd, f.Name(), err)
	}
	in.addr = pc.LocalAddr()
	pc.Close()
	if in.proto = in.addr.Network(); in.proto != "udp" {
		return nil, fmt.Errorf("%v: not a listening stream socket or a UDP socket", in)
	}
	return in, nil
}

// fits reports whether r uses in: in is named after r, or it is of r's
// protocol and bound to r's address.
func (in *inherited) fits(r *Route) bool {
	proto := strings.TrimRight(r.Listen.Network, "46")
	if proto != in.proto {
		return false
	}
	if in.name != "" && in.name == r.Name {
		return true
	}
	if proto == "unix" {
		want, got := r.Listen.Address, in.addr.String()
		if !strings.HasPrefix(want, "@") {
			want, got = filepath.Clean(want), filepath.Clean(got)
		}
		return want == got
	}
	want, err := netip.ParseAddrPort(r.Listen.Address)
	if err != nil || want.Port() == 0 {
		return false // a host name, or a new port each time
	}
	got := netAddrPort(in.addr)
	if got.Port() != want.Port() {
		return false
	}
	wa, ga := want.Addr().Unmap(), got.Addr()
	if !wa.IsUnspecified() || !ga.IsUnspecified() {
		return wa == ga.Unmap()
	}
	switch r.Listen.Network[len(r.Listen.Network)-1] {
	case '4':
		return ga.Is4()
	case '6':
		return ga.Is6()
	}
	return true
}

// netAddrPort returns a TCP or UDP address as a netip.AddrPort.
func netAddrPort(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.AddrPort()
	case *net.UDPAddr:
		return a.AddrPort()
	}
	return netip.AddrPort{}
}

// inheritedFor returns the inherited sockets any of rs uses. s.mu is
// held.
func (s *Server) inheritedFor(rs ...Route) []*inherited {
	var ins []*inherited
	for _, in := range s.inherited {
		for i := range rs {
			if in.fits(&rs[i]) {
				ins = append(ins, in)
				break
			}
		}
	}
	return ins
}

// checkInherited returns an error naming the inherited sockets no route
// of cfg uses.
func (s *Server) checkInherited(cfg Config) error {
	used := s.inheritedFor(cfg.Routes...)
	var idle []string
	for _, in := range s.inherited {
		if !slices.Contains(used, in) {
			idle = append(idle, in.String())
		}
	}
	if len(idle) > 0 {
		return fmt.Errorf("relay: no route listens on the inherited socket(s) %s", strings.Join(idle, ", "))
	}
	return nil
}

// listenInherited returns listeners for r's front on ins, the inherited
// sockets its routes use, and binds beside them the workers r has more.
func listenInherited(r *Route, ins []*inherited) ([]net.Listener, error) {
	var lns []net.Listener
	for _, in := range ins {
		ln, err := net.FileListener(in.f) // a duplicate
		if err == nil && len(ins) < r.Workers {
			err = reusePort(listenerControl(ln))
		}
		if err != nil {
			closeAll(append(lns, ln))
			return nil, fmt.Errorf("inherited %v: %w", in, err)
		}
		lns = append(lns, ln)
	}
	if n := r.Workers - len(lns); n > 0 {
		more, err := listenStreamAt(r, lns[0].Addr().String(), n, true)
		if err != nil {
			closeAll(lns)
			return nil, err
		}
		lns = append(lns, more...)
	}
	return lns, nil
}

// inheritedUDP returns UDP sockets for r on ins, the inherited sockets
// it uses, and binds beside them the workers r has more.
func inheritedUDP(r *Route, ins []*inherited) ([]*udpSock, error) {
	var lns []*udpSock
	for _, in := range ins {
		pc, err := net.FilePacketConn(in.f) // a duplicate
		var ln *udpSock
		if err == nil {
			ln, err = newUDPSock(r, pc.(*net.UDPConn))
		}
		if err == nil && len(ins) < r.Workers {
			err = reusePort(ln)
		}
		if err != nil {
			if ln != nil {
				lns = append(lns, ln)
			}
			closeUDPSocks(lns)
			return nil, fmt.Errorf("inherited %v: %w", in, err)
		}
		lns = append(lns, ln)
	}
	if n := r.Workers - len(lns); n > 0 {
		more, err := openUDPSocks(r, lns[0].LocalAddr().String(), n, true)
		if err != nil {
			closeUDPSocks(lns)
			return nil, err
		}
		lns = append(lns, more...)
	}
	return lns, nil
}

// closeInherited closes the inherited sockets; the routes' duplicates
// are theirs to close. s.mu is held.
func (s *Server) closeInherited() {
	for _, in := range s.inherited {
		in.f.Close()
	}
	s.inherited = nil
}
