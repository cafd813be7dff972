package relay

import (
	"encoding/binary"
	"net/netip"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The event loops make their socket calls through the raw system call
// interface with sockaddrs in fixed buffers: x/sys/unix's Accept4,
// Connect and Getsockname convert to and from the Sockaddr interface,
// which allocates on every call. None of these calls can block on a
// non-blocking socket, so they need not tell the scheduler (see package
// internal/nbsys for why that matters).

// sockaddr is a socket address in the kernel's layout, ready for
// connect(2).
type sockaddr struct {
	raw    unix.RawSockaddrAny
	len    uint32
	family int
}

// sockaddrOf builds the sockaddr of a TCP address.
func sockaddrOf(ap netip.AddrPort) sockaddr {
	var sa sockaddr
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(&sa.raw))
		p.Family = unix.AF_INET
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&p.Port))[:], ap.Port())
		p.Addr = ip.As4()
		sa.len, sa.family = unix.SizeofSockaddrInet4, unix.AF_INET
		return sa
	}
	p := (*unix.RawSockaddrInet6)(unsafe.Pointer(&sa.raw))
	p.Family = unix.AF_INET6
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&p.Port))[:], ap.Port())
	p.Addr = ip.As16()
	sa.len, sa.family = unix.SizeofSockaddrInet6, unix.AF_INET6
	return sa
}

// sockaddrUnix builds the sockaddr of a Unix socket path; a leading '@'
// names an abstract socket (unix(7)), as in package net.
func sockaddrUnix(path string) (sockaddr, bool) {
	var sa sockaddr
	p := (*unix.RawSockaddrUnix)(unsafe.Pointer(&sa.raw))
	if len(path) == 0 || len(path) >= len(p.Path) {
		return sa, false
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
	sa.len, sa.family = uint32(2+n), unix.AF_UNIX
	return sa, true
}

// addrPortOf decodes a sockaddr returned by the kernel; a Unix peer has
// none (the zero AddrPort). A v4-mapped IPv6 address is unmapped, as
// addrPort does for package net's addresses.
func addrPortOf(raw *unix.RawSockaddrAny) netip.AddrPort {
	switch raw.Addr.Family {
	case unix.AF_INET:
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(raw))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&p.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(p.Addr), port)
	case unix.AF_INET6:
		p := (*unix.RawSockaddrInet6)(unsafe.Pointer(raw))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&p.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom16(p.Addr).Unmap(), port)
	}
	return netip.AddrPort{}
}

// accept4 accepts a connection on the non-blocking listener fd, giving a
// non-blocking, close-on-exec socket and its peer's address.
func accept4(fd int, raw *unix.RawSockaddrAny) (int, unix.Errno) {
	l := uint32(unix.SizeofSockaddrAny)
	r, _, e := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(fd), uintptr(unsafe.Pointer(raw)),
		uintptr(unsafe.Pointer(&l)), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	return int(r), e
}

// socketFor opens a non-blocking socket for connecting to sa.
func socketFor(sa *sockaddr) (int, unix.Errno) {
	r, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(sa.family),
		unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	return int(r), e
}

// connect starts connecting fd to sa; on a non-blocking socket it returns
// EINPROGRESS when the handshake goes on in the background.
func connect(fd int, sa *sockaddr) unix.Errno {
	_, _, e := unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa.raw)), uintptr(sa.len))
	return e
}

// sockname returns fd's local or (peer) remote address.
func sockname(fd int, peer bool) netip.AddrPort {
	var raw unix.RawSockaddrAny
	l := uint32(unix.SizeofSockaddrAny)
	trap := uintptr(unix.SYS_GETSOCKNAME)
	if peer {
		trap = unix.SYS_GETPEERNAME
	}
	_, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&raw)), uintptr(unsafe.Pointer(&l)))
	if e != 0 {
		return netip.AddrPort{}
	}
	return addrPortOf(&raw)
}

// setInt is setsockopt(2) of an int option, with no allocation.
func setInt(fd, level, opt, v int) {
	v32 := int32(v)
	unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&v32)), 4, 0)
}

// soError returns and clears fd's pending error (SO_ERROR), as a failed
// non-blocking connect leaves it.
func soError(fd int) unix.Errno {
	var v int32
	l := uint32(4)
	_, _, e := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_ERROR,
		uintptr(unsafe.Pointer(&v)), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return unix.Errno(v)
}

// Keep-alive probes as package net sends them (net.KeepAliveConfig's
// defaults), which the goroutine engine applies: every 15 s, 9 of them.
const (
	keepAliveInterval = 15 * time.Second
	keepAliveCount    = 9
)

// setSocketOptions applies a route's per-socket options to a TCP socket
// of a relay, as the goroutine engine does through package net:
// TCP_NODELAY unless Nagle (sockets the loop creates start with Nagle on;
// accepted ones inherit the listener's TCP_NODELAY, set when it was
// adopted), and keep-alive only if the route asks for it (a positive
// period), with package net's probe interval and count.
func setSocketOptions(fd int, r *Route, fresh bool) {
	switch {
	case fresh && !r.Nagle:
		setInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	case !fresh && r.Nagle:
		setInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 0)
	}
	if r.KeepAlive <= 0 { // keep-alive only when asked
		return
	}
	idle := r.KeepAlive
	secs := int((idle + time.Second - 1) / time.Second)
	setInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
	setInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, secs)
	setInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, int(keepAliveInterval/time.Second))
	setInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, keepAliveCount)
}

// read, write and splice are the loop's data calls on non-blocking
// descriptors.
func read(fd int, p []byte) (int, unix.Errno) {
	r, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(r), e
}

func write(fd int, p []byte) (int, unix.Errno) {
	r, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(r), e
}

// sendMore is write with MSG_MORE (send(2)): on TCP the bytes wait for
// more, here the FIN that follows, instead of leaving in a segment of
// their own; Unix sockets ignore the flag.
func sendMore(fd int, p []byte) (int, unix.Errno) {
	r, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)),
		unix.MSG_MORE|unix.MSG_NOSIGNAL, 0, 0)
	return int(r), e
}

func spliceFD(rfd, wfd, n int) (int, unix.Errno) {
	r, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(rfd), 0, uintptr(wfd), 0, uintptr(n),
		unix.SPLICE_F_NONBLOCK|unix.SPLICE_F_MOVE)
	return int(r), e
}

func shutdownWrite(fd int) unix.Errno {
	_, _, e := unix.RawSyscall(unix.SYS_SHUTDOWN, uintptr(fd), unix.SHUT_WR, 0)
	return e
}

func closeFD(fd int) { unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0) }
