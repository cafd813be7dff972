package relay

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// This file is the one place that puts sockets in SO_REUSEPORT groups
// and steers a group, for stream listeners and UDP sockets alike.

func reusePortSupported() error { return nil }

// controller is a socket whose options can be set: a listener's
// syscall.RawConn (see listenerControl), or a *udp.Conn, whose Control
// (unlike SyscallConn, which hands the socket out) leaves GRO on.
type controller interface {
	Control(f func(fd uintptr)) error
}

// reusePort sets SO_REUSEPORT on c, so that several sockets can bind one
// address and the kernel spreads incoming connections or datagrams over
// them (socket(7), Linux 3.9). Set on a socket bound without it, it lets
// new sockets bind beside it: the kernel checks the option of both at the
// new one's bind and, for streams, makes them one group at its listen(2);
// UDP sockets join at bind (one group when their address is the same,
// two groups sharing the port when one is the wildcard; udp_lib_get_port).
func reusePort(c controller) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

// setReusePort is reusePort as a net.ListenConfig's Control: the option
// is set before the socket binds.
func setReusePort(network, address string, c syscall.RawConn) error { return reusePort(c) }

// steer makes the kernel give what reaches c's SO_REUSEPORT group (new
// connections, or datagrams) only to its sockets first to first+n-1: a
// classic BPF program on the group (SO_ATTACH_REUSEPORT_CBPF, Linux 4.5)
// returns first plus a random number below n. Sockets are numbered in
// the order they joined (listen(2) for streams, bind for UDP), and
// closing one moves the last into its place (socket(7)), so as long as
// only the last ones close, the others keep their numbers. An index past
// the group's end makes the kernel fall back to its hash. A program
// attached later replaces this one.
func steer(c controller, first, n int) error {
	prog := []unix.SockFilter{
		// A = a random number (SKF_AD_RANDOM, an ancillary load).
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: skfAdOff + skfAdRandom},
		{Code: unix.BPF_ALU | unix.BPF_MOD | unix.BPF_K, K: uint32(n)},
		{Code: unix.BPF_ALU | unix.BPF_ADD | unix.BPF_K, K: uint32(first)},
		{Code: unix.BPF_RET | unix.BPF_A},
	}
	fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &fp)
	})
	if err != nil {
		return err
	}
	return serr
}

// Ancillary data offsets of classic BPF (linux/filter.h).
const (
	skfAdOff    = 0xfffff000 // -0x1000 as the uint32 a SockFilter carries
	skfAdRandom = 56
)

// listenerControl returns ln's RawConn, for reusePort and steer; one that
// fails with EOPNOTSUPP if ln has no descriptor.
func listenerControl(ln net.Listener) controller {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return noControl{unix.EOPNOTSUPP}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return noControl{err}
	}
	return rc
}

// noControl is a controller that fails with err.
type noControl struct{ err error }

func (n noControl) Control(func(fd uintptr)) error { return n.err }
