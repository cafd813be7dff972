package relay

import (
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxQueued bounds what queued takes from one listener (the kernel's
// default somaxconn), so that clients still connecting while a reload
// runs cannot keep it, and the server's lock it holds, busy.
const maxQueued = 4096

// closeQueued closes ln and returns the connections whose handshake was
// done and that waited in its accept queue, so that the close does not
// reset them. A client whose handshake completes between the last accept
// and the close is reset by it, so nothing slow comes between the two:
// an event engine's loops stop watching ln first, and the accepted
// sockets are wrapped for package net once ln is closed. Taking the
// queue stops at maxQueued or at the first error other than EINTR or
// ECONNABORTED: EAGAIN (the queue is empty) or, out of descriptors,
// whatever is left is reset by the close as before.
func closeQueued(ln net.Listener) []net.Conn {
	if u, ok := ln.(interface{ unwatch() }); ok {
		u.unwatch()
	}
	var fds []int
	if sc, ok := ln.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) {
				for len(fds) < maxQueued {
					nfd, _, err := unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
					switch err {
					case nil:
						fds = append(fds, nfd)
					case unix.EINTR, unix.ECONNABORTED:
					default:
						return
					}
				}
			})
		}
	}
	ln.Close()
	var cs []net.Conn
	for _, fd := range fds {
		f := os.NewFile(uintptr(fd), "")
		c, err := net.FileConn(f) // a dup, in the netpoller
		f.Close()
		if err == nil {
			cs = append(cs, c)
		}
	}
	return cs
}
