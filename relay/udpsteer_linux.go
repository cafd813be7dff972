package relay

import (
	"time"

	"golang.org/x/sys/unix"
)

// controlConn runs f on c's descriptor.
func controlConn(c controller, f func(fd int) error) error {
	var ferr error
	if err := c.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// membarrierCmdGlobal is MEMBARRIER_CMD_GLOBAL (linux/membarrier.h).
const membarrierCmdGlobal = 1

// settleSteering returns once every datagram whose socket the kernel
// chose under a group's previous steering sits in that socket's queue,
// so that draining a socket steered away from finds all it will ever
// get. The choice (the reuseport program run by the UDP lookup) and the
// enqueue happen in one RCU read-side section of the receive softirq
// (ip_local_deliver_finish), and membarrier(2)'s MEMBARRIER_CMD_GLOBAL
// waits for an RCU grace period (synchronize_rcu in
// kernel/sched/membarrier.c). Where the command is refused (nohz_full
// kernels, or before Linux 4.3), a pause stands in for it.
func settleSteering() {
	if _, _, e := unix.Syscall(unix.SYS_MEMBARRIER, membarrierCmdGlobal, 0, 0); e != 0 {
		time.Sleep(50 * time.Millisecond)
	}
}

// unhashUDP takes a listening UDP socket out of the kernel's choice for
// datagrams from clients while keeping what it holds: connected to its
// own address (the loopback address if it is bound to the wildcard), it
// matches only datagrams from there (a connected socket receives from its
// peer only, udp(7)), so clients' datagrams go to the other sockets on
// its port. A route that moves off an address that outranks the new one
// for the kernel (a specific address for the wildcard, an IPv4 socket for
// a dual-stack one) does this before draining its old sockets, which
// would otherwise take datagrams until they close.
func unhashUDP(c controller) error {
	return controlConn(c, func(fd int) error {
		la, err := unix.Getsockname(fd)
		if err != nil {
			return err
		}
		switch la := la.(type) {
		case *unix.SockaddrInet4:
			to := &unix.SockaddrInet4{Port: la.Port, Addr: la.Addr}
			if to.Addr == [4]byte{} {
				to.Addr = [4]byte{127, 0, 0, 1}
			}
			return unix.Connect(fd, to)
		case *unix.SockaddrInet6:
			to := &unix.SockaddrInet6{Port: la.Port, Addr: la.Addr, ZoneId: la.ZoneId}
			if to.Addr == [16]byte{} {
				to.Addr[15] = 1 // ::1
			}
			return unix.Connect(fd, to)
		}
		return unix.EAFNOSUPPORT
	})
}
