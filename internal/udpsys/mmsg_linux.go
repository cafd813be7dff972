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
	trap  uintptr
}

// NewMmsgCall returns a call of unix.SYS_RECVMMSG or unix.SYS_SENDMMSG.
func NewMmsgCall(trap uintptr) *MmsgCall {
	c := &MmsgCall{trap: trap}
	c.Fn = c.run
	return c
}

// run makes the call, retrying on EINTR. On EAGAIN it returns false, which
// makes the netpoller wait for readiness (or the deadline) and call again.
func (c *MmsgCall) run(fd uintptr) bool {
	for {
		n, _, e := unix.Syscall6(c.trap, fd, uintptr(unsafe.Pointer(&c.Hs[0])), uintptr(len(c.Hs)), 0, 0, 0)
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

// Grow returns s with length n, reusing its array when it is big enough.
func Grow[T any](s []T, n int) []T {
	if n <= cap(s) {
		return s[:n]
	}
	return make([]T, n, n+n/4)
}
