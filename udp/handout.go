package udp

import (
	"os"
	"syscall"
)

// SyscallConn returns the socket's raw connection, as
// [net.UDPConn.SyscallConn] does. It hands the socket out: whatever reads
// it through the returned RawConn (recvmsg, recvmmsg, x/net's
// ipv4.PacketConn.ReadBatch) must get one datagram per read, so GRO is
// turned off first, for good (see the package doc). Use [Conn.Control] to
// set socket options without giving GRO up.
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	c.handOut()
	return c.uc.SyscallConn()
}

// File returns a copy of the socket's descriptor as an *os.File, as
// [net.UDPConn.File] does. Like [Conn.SyscallConn] it turns GRO off for
// good first.
func (c *Conn) File() (*os.File, error) {
	c.handOut()
	return c.uc.File()
}

// Control calls f with the socket's descriptor, for socket options
// (setsockopt, getsockopt), as syscall.RawConn's Control does, and leaves
// GRO as it is. f must not read from the descriptor: a read there may
// return several datagrams merged by GRO; read through [Conn.SyscallConn].
func (c *Conn) Control(f func(fd uintptr)) error {
	return c.rc.Control(f)
}

// handOut turns GRO off for good before the socket is handed to a reader
// that is not the Conn's. If a read of the Conn is under way (it may be
// waiting for a datagram) it does not wait for it.
func (c *Conn) handOut() {
	c.groMu.Lock()
	if c.handedOut {
		c.groMu.Unlock()
		return
	}
	c.handedOut = true
	on := c.groOn.Load()
	c.groMu.Unlock()
	if !on {
		return
	}
	if c.readMu.TryLock() {
		c.stopGRO(true)
		c.readMu.Unlock()
		return
	}
	c.stopGRO(false)
}

// startGRO turns GRO on at the Conn's first read, unless Options or the
// environment turned it off or the socket has been handed out.
// c.readMu is held.
func (c *Conn) startGRO() {
	c.groMu.Lock()
	defer c.groMu.Unlock()
	if c.groTried {
		return
	}
	c.groTried = true
	if c.opts.DisableGRO || c.handedOut {
		return
	}
	c.groOn.Store(c.setGRO(true))
}
