package relay

import (
	"net"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// enableReusePort sets SO_REUSEPORT on a listening socket opened without
// it, so that new sockets can bind its address beside it: the kernel
// checks the option of both sockets at the new one's bind and makes them
// one group at its listen(2) (socket(7)).
func enableReusePort(ln net.Listener) error {
	return control(ln, func(fd int) error {
		return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	})
}

// steer makes the kernel give new connections only to the first n sockets
// of the SO_REUSEPORT group ln is in: a classic BPF program attached to
// the group (SO_ATTACH_REUSEPORT_CBPF, Linux 4.5) returns a random index
// below n. Sockets are numbered in the order they called listen(2), and
// closing one moves the last into its place (socket(7)), so as long as
// the sockets past n are the only ones closed, the first n keep their
// numbers. A program attached later replaces this one.
func steer(ln net.Listener, n int) error {
	prog := []unix.SockFilter{
		// A = a random number (SKF_AD_RANDOM, an ancillary load).
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: skfAdOff + skfAdRandom},
		{Code: unix.BPF_ALU | unix.BPF_MOD | unix.BPF_K, K: uint32(n)},
		{Code: unix.BPF_RET | unix.BPF_A},
	}
	fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	return control(ln, func(fd int) error {
		return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &fp)
	})
}

// Ancillary data offsets of classic BPF (linux/filter.h).
const (
	skfAdOff    = 0xfffff000 // -0x1000 as the uint32 a SockFilter carries
	skfAdRandom = 56
)

// control runs f on ln's descriptor.
func control(ln net.Listener, f func(fd int) error) error {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return unix.EOPNOTSUPP
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// migrateReq reports whether the kernel moves the connections in flight
// on a closing listener to another of its SO_REUSEPORT group
// (net.ipv4.tcp_migrate_req, Linux 5.14; ip-sysctl.rst).
func migrateReq() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_migrate_req")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}
