package udpsys

import (
	"net"
	"net/netip"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sockaddr is storage large enough for a sockaddr_in or sockaddr_in6. It is
// a RawSockaddrInet6 so that its alignment suits both.
type Sockaddr = unix.RawSockaddrInet6

// PutSockaddr writes ap into sa in the form a socket of the given family
// (unix.AF_INET or unix.AF_INET6) expects and returns the length to pass to
// the kernel. On an AF_INET6 socket an IPv4 address is written IPv4-mapped
// (dual-stack); on an AF_INET socket an IPv4-mapped IPv6 address is
// unmapped. It returns 0 if ap cannot be sent from such a socket (an
// invalid address, or IPv6 on an AF_INET socket).
func PutSockaddr(sa *Sockaddr, family int, ap netip.AddrPort) uint32 {
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

// ParseSockaddr reads the address the kernel stored in sa. IPv4-mapped
// IPv6 addresses come back as IPv4. A family other than AF_INET or AF_INET6
// gives the zero AddrPort. Only a link-local IPv6 address with a scope id
// allocates (its zone string).
func ParseSockaddr(sa *Sockaddr) netip.AddrPort {
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

func putPort(p *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}

func getPort(p *uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// zoneIndex turns an IPv6 zone (an interface name or a number) into a scope
// id; 0 if unknown.
func zoneIndex(z string) uint32 {
	if n, err := strconv.ParseUint(z, 10, 32); err == nil {
		return uint32(n)
	}
	if ifi, err := net.InterfaceByName(z); err == nil {
		return uint32(ifi.Index)
	}
	return 0
}
