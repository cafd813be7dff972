package udpsys

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// MmsgCall is one recvmmsg(2) or sendmmsg(2) run as a syscall.RawConn
// callback. Fn is the method value bound once by [NewMmsgCall], so passing
// it to RawConn.Read or Write allocates nothing (the technique of x/net CL
// 380934). Set Hs, call RawConn.Read/Write(Fn), then read N and Errno.
type MmsgCall struct {
	Hs    []unix.Mmsghdr // headers for the next call; must not be empty
	N     int            // headers filled or sent by the last call
	Errno unix.Errno     // error of the last call, 0 if N is valid
	Fn    func(fd uintptr) bool
	trap  uintptr // SYS_RECVMMSG or SYS_SENDMMSG
}

// NewMmsgCall returns a call of unix.SYS_RECVMMSG or unix.SYS_SENDMMSG.
func NewMmsgCall(trap uintptr) *MmsgCall {
	c := &MmsgCall{trap: trap}
	c.Fn = c.run
	return c
}

// run makes the call, retrying on EINTR. On EAGAIN it returns false, which
// makes the netpoller wait for readiness (or the deadline) and call again.
//
// The calls are raw (RawSyscall6, not Syscall6), as package
// internal/nbsys explains: the sockets of package net never block.
func (c *MmsgCall) run(fd uintptr) bool {
	for {
		var n uintptr
		var e unix.Errno
		// One message without control data: sendto or recvfrom.
		if len(c.Hs) == 1 && c.Hs[0].Hdr.Controllen == 0 && c.Hs[0].Hdr.Iovlen == 1 {
			n, e = c.one(fd, &c.Hs[0])
		} else {
			n, _, e = unix.RawSyscall6(c.trap, fd, uintptr(unsafe.Pointer(&c.Hs[0])), uintptr(len(c.Hs)), 0, 0, 0)
		}
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		case 0:
			c.N, c.Errno = int(n), 0
		default:
			c.N, c.Errno = 0, e
		}
		return true
	}
}

// one serves a single header without control data with sendto(2) or
// recvfrom(2), as the standard library does: the kernel's path for them
// skips the msghdr copy and control-message handling of sendmmsg and
// recvmmsg, a measurable share of the cost of one datagram. It fills h as
// the mmsg call would, MSG_TRUNC and the byte count included, and returns
// 1.
func (c *MmsgCall) one(fd uintptr, h *unix.Mmsghdr) (uintptr, unix.Errno) {
	iov := h.Hdr.Iov
	if c.trap == unix.SYS_SENDMMSG {
		n, _, e := unix.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(iov.Base)), uintptr(iov.Len),
			0, uintptr(unsafe.Pointer(h.Hdr.Name)), uintptr(h.Hdr.Namelen))
		if e != 0 {
			return 0, e
		}
		h.Len = uint32(n)
		return 1, 0
	}
	namelen := h.Hdr.Namelen
	n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(iov.Base)), uintptr(iov.Len),
		unix.MSG_TRUNC, uintptr(unsafe.Pointer(h.Hdr.Name)), uintptr(unsafe.Pointer(&namelen)))
	if e != 0 {
		return 0, e
	}
	h.Hdr.Namelen = namelen
	h.Hdr.Flags = 0
	if uint64(n) > uint64(iov.Len) { // MSG_TRUNC: n is the datagram's real length
		h.Hdr.Flags = unix.MSG_TRUNC
		n = uintptr(iov.Len)
	}
	h.Len = uint32(n)
	return 1, 0
}

// Grow returns s with length n, reusing its array when it is big enough.
func Grow[T any](s []T, n int) []T {
	if n <= cap(s) {
		return s[:n]
	}
	return make([]T, n, n+n/4)
}
