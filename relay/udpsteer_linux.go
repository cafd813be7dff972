package relay

import (
	"syscall"

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
