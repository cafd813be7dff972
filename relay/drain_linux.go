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

// queued accepts, without waiting, the connections whose handshake is done
// and that wait in ln's accept queue, so that closing ln does not reset
// them. It stops at maxQueued or at the first error other than EINTR or
// ECONNABORTED: EAGAIN (the queue is empty) or, out of descriptors,
// whatever is left is reset by the close as before.
func queued(ln net.Listener) []net.Conn {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var fds []int
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
