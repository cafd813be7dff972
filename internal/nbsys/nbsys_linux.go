package nbsys

import (
	"net/netip"
	"unsafe"

	"github.com/zeroio/zeroio/internal/sockaddr"
	"golang.org/x/sys/unix"
)

// Read is read(2) of a non-blocking socket, such as one of package net.
func Read(fd int, p []byte) (int, unix.Errno) { return rw(unix.SYS_READ, fd, p) }

// Write is write(2) of a non-blocking socket.
func Write(fd int, p []byte) (int, unix.Errno) { return rw(unix.SYS_WRITE, fd, p) }

func rw(trap uintptr, fd int, p []byte) (int, unix.Errno) {
	var base unsafe.Pointer
	if len(p) > 0 {
		base = unsafe.Pointer(&p[0])
	}
	n, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(base), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

// SendMore is write(2) with MSG_MORE (send(2)): on TCP the bytes wait
// for more, such as the FIN that shutdown sends next, instead of leaving
// in a segment of their own; Unix sockets ignore the flag. MSG_NOSIGNAL:
// a peer that reset gives EPIPE, not SIGPIPE.
func SendMore(fd int, p []byte) (int, unix.Errno) {
	var base unsafe.Pointer
	if len(p) > 0 {
		base = unsafe.Pointer(&p[0])
	}
	n, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(base), uintptr(len(p)),
		unix.MSG_MORE|unix.MSG_NOSIGNAL, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

// Splice is splice(2) between a pipe and a non-blocking descriptor, with
// no offsets; flags should hold SPLICE_F_NONBLOCK so that the pipe side
// cannot block either.
func Splice(rfd, wfd int, n int, flags int) (int, unix.Errno) {
	r, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(rfd), 0, uintptr(wfd), 0, uintptr(n), uintptr(flags))
	if e != 0 {
		return 0, e
	}
	return int(r), 0
}

// Accept4 accepts a connection on the non-blocking listener fd, giving a
// non-blocking, close-on-exec socket, and stores its peer's address in
// raw (see [sockaddr.Parse]).
func Accept4(fd int, raw *unix.RawSockaddrAny) (int, unix.Errno) {
	l := uint32(unix.SizeofSockaddrAny)
	r, _, e := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(fd), uintptr(unsafe.Pointer(raw)),
		uintptr(unsafe.Pointer(&l)), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), 0
}

// StreamSocket opens a non-blocking, close-on-exec stream socket of the
// given family.
func StreamSocket(family int) (int, unix.Errno) {
	r, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(family),
		unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), 0
}

// Connect starts connecting fd to sa; on a non-blocking socket it
// returns EINPROGRESS when the handshake goes on in the background.
func Connect(fd int, sa *sockaddr.Addr) unix.Errno {
	_, _, e := unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa.Raw)), uintptr(sa.Len))
	return e
}

// LocalAddr returns fd's local address (getsockname(2)), PeerAddr its
// peer's (getpeername(2)): the zero AddrPort for a Unix socket or when
// the call fails.
func LocalAddr(fd int) netip.AddrPort { return name(unix.SYS_GETSOCKNAME, fd) }

// PeerAddr: see [LocalAddr].
func PeerAddr(fd int) netip.AddrPort { return name(unix.SYS_GETPEERNAME, fd) }

func name(trap uintptr, fd int) netip.AddrPort {
	var raw unix.RawSockaddrAny
	l := uint32(unix.SizeofSockaddrAny)
	_, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&raw)), uintptr(unsafe.Pointer(&l)))
	if e != 0 {
		return netip.AddrPort{}
	}
	return sockaddr.Parse(&raw)
}

// SetsockoptInt is setsockopt(2) of an int option, without the
// allocation of x/sys/unix's boxed error.
func SetsockoptInt(fd, level, opt, v int) unix.Errno {
	v32 := int32(v)
	_, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&v32)), 4, 0)
	return e
}

// SoError returns and clears fd's pending error (SO_ERROR), as a failed
// non-blocking connect leaves it.
func SoError(fd int) unix.Errno {
	var v int32
	l := uint32(4)
	_, _, e := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_ERROR,
		uintptr(unsafe.Pointer(&v)), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return unix.Errno(v)
}

// ShutdownWrite shuts down fd's writing side (shutdown(2), SHUT_WR).
func ShutdownWrite(fd int) unix.Errno {
	_, _, e := unix.RawSyscall(unix.SYS_SHUTDOWN, uintptr(fd), unix.SHUT_WR, 0)
	return e
}

// Close is close(2). On Linux the descriptor is released even when close
// reports an error (close(2)), so there is nothing to do with one.
func Close(fd int) { unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0) }
