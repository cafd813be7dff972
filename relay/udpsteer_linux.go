package relay

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// reusePortUDP sets SO_REUSEPORT on a UDP socket bound without it, so that
// sockets bound later to its port join it (one group when their address
// is the same, two groups sharing the port when one is the wildcard):
// udp_lib_get_port checks the option of both sockets at the later bind.
func reusePortUDP(c syscall.Conn) error {
	return controlConn(c, func(fd int) error {
		return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	})
}

// steerUDP makes the kernel give the datagrams that reach c's SO_REUSEPORT
// group only to its sockets first to first+n-1: a classic BPF program on
// the group (SO_ATTACH_REUSEPORT_CBPF, Linux 4.5) returns first plus a
// random number below n. UDP sockets join a group in the order they bind,
// and closing one moves the last into its place (socket(7)), so the
// sockets of a route keep their numbers as long as only the last ones
// close. An index past the group's end makes the kernel fall back to its
// hash. A program attached later replaces this one.
func steerUDP(c syscall.Conn, first, n int) error {
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: skfAdOff + skfAdRandom},
		{Code: unix.BPF_ALU | unix.BPF_MOD | unix.BPF_K, K: uint32(n)},
		{Code: unix.BPF_ALU | unix.BPF_ADD | unix.BPF_K, K: uint32(first)},
		{Code: unix.BPF_RET | unix.BPF_A},
	}
	fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	return controlConn(c, func(fd int) error {
		return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &fp)
	})
}

// controlConn runs f on c's descriptor.
func controlConn(c syscall.Conn, f func(fd int) error) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
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
