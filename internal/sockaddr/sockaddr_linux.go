package sockaddr

import (
	"net"
	"net/netip"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Inet is storage large enough for a sockaddr_in or sockaddr_in6. It is
// a RawSockaddrInet6 so that its alignment suits both.
type Inet = unix.RawSockaddrInet6

// PutInet writes ap into sa in the form a socket of the given family
// (unix.AF_INET or unix.AF_INET6) expects and returns the length to pass
// to the kernel. On an AF_INET6 socket an IPv4 address is written
// IPv4-mapped (dual-stack); on an AF_INET socket an IPv4-mapped IPv6
// address is unmapped. It returns 0 if ap cannot be sent from such a
// socket (an invalid address, or IPv6 on an AF_INET socket). Only a zone
// given as an interface name allocates (its lookup).
func PutInet(sa *Inet, family int, ap netip.AddrPort) uint32 {
	ip := ap.Addr()
	port := ap.Port()
	if !ip.IsValid() {
		return 0
	}
	if family == unix.AF_INET {
		ip = ip.Unmap()
		if !ip.Is4() {
			return 0
		}
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		s4.Family = unix.AF_INET
		putPort(&s4.Port, port)
		s4.Addr = ip.As4()
		s4.Zero = [8]byte{}
		return unix.SizeofSockaddrInet4
	}
	sa.Family = unix.AF_INET6
	putPort(&sa.Port, port)
	sa.Flowinfo = 0
	sa.Addr = ip.As16() // IPv4 becomes ::ffff:a.b.c.d
	sa.Scope_id = 0
	if z := ip.Zone(); z != "" {
		sa.Scope_id = zoneIndex(z)
	}
	return unix.SizeofSockaddrInet6
}

// ParseInet reads the address the kernel stored in sa. IPv4-mapped IPv6
// addresses come back as IPv4. A family other than AF_INET or AF_INET6
// gives the zero AddrPort. Only a link-local IPv6 address with a scope
// id allocates (its zone string).
func ParseInet(sa *Inet) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(s4.Addr), getPort(&s4.Port))
	case unix.AF_INET6:
		ip := netip.AddrFrom16(sa.Addr)
		if ip.Is4In6() {
			ip = ip.Unmap()
		} else if sa.Scope_id != 0 {
			ip = ip.WithZone(strconv.FormatUint(uint64(sa.Scope_id), 10))
		}
		return netip.AddrPortFrom(ip, getPort(&sa.Port))
	}
	return netip.AddrPort{}
}

// Parse reads an address of any family, as accept(2) or getsockname(2)
// return it, as ParseInet does; a Unix socket's gives the zero AddrPort.
func Parse(raw *unix.RawSockaddrAny) netip.AddrPort {
	return ParseInet((*Inet)(unsafe.Pointer(raw)))
}

// Addr is a socket address of any family in the kernel's layout, ready
// for connect(2): Raw holds Len bytes of it.
type Addr struct {
	Raw    unix.RawSockaddrAny
	Len    uint32
	Family int
}

// FromAddrPort builds the Addr of an IP address and port: AF_INET for an
// IPv4 (or IPv4-mapped) address, AF_INET6 otherwise. An invalid address
// gives Len 0, which connect(2) refuses.
func FromAddrPort(ap netip.AddrPort) Addr {
	var a Addr
	a.Family = unix.AF_INET6
	if ap.Addr().Unmap().Is4() {
		a.Family = unix.AF_INET
	}
	a.Len = PutInet((*Inet)(unsafe.Pointer(&a.Raw)), a.Family, ap)
	return a
}

// FromUnix builds the Addr of a Unix socket path; a leading '@' names an
// abstract socket (unix(7)), as in package net. It reports false for an
// empty path or one too long for sun_path.
func FromUnix(path string) (Addr, bool) {
	var a Addr
	p := (*unix.RawSockaddrUnix)(unsafe.Pointer(&a.Raw))
	if len(path) == 0 || len(path) >= len(p.Path) {
		return a, false
	}
	p.Family = unix.AF_UNIX
	for i := 0; i < len(path); i++ {
		p.Path[i] = int8(path[i])
	}
	n := len(path)
	if path[0] == '@' {
		p.Path[0] = 0
	} else {
		n++ // the terminating NUL
	}
	a.Len, a.Family = uint32(2+n), unix.AF_UNIX
	return a, true
}

// AddrPort returns a's IP address and port; the zero AddrPort for a Unix
// socket.
func (a *Addr) AddrPort() netip.AddrPort { return Parse(&a.Raw) }

func putPort(p *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}

func getPort(p *uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// zoneIndex turns an IPv6 zone (an interface name or a number) into a
// scope id; 0 if unknown.
func zoneIndex(z string) uint32 {
	if n, err := strconv.ParseUint(z, 10, 32); err == nil {
		return uint32(n)
	}
	if ifi, err := net.InterfaceByName(z); err == nil {
		return uint32(ifi.Index)
	}
	return 0
}
