package udp

import (
	"errors"
	"os"
	"syscall"
	"time"
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
// that is not the Conn's, splitting first what the kernel already
// coalesced (drainGRO). It needs the read lock for that: a read of the
// Conn waiting in the netpoller holds it, so the hand-out wakes it with a
// read deadline in the past, and the woken read waits for the hand-out to
// end, then reads again under the caller's deadline, which the hand-out
// has put back.
func (c *Conn) handOut() {
	c.handMu.Lock()
	defer c.handMu.Unlock()
	if c.handedOut.Swap(true) || !c.groOn.Load() {
		// Never on, or a read turning it on now sees handedOut and
		// turns it off again itself (startGRO).
		return
	}
	if !c.readMu.TryLock() {
		c.dlMu.Lock()
		c.waking.Store(true)
		c.uc.SetReadDeadline(time.Unix(1, 0))
		c.readMu.Lock()
		c.uc.SetReadDeadline(c.rdl)
		c.dlMu.Unlock()
	}
	c.stopGRO()
	c.waking.Store(false)
	c.readMu.Unlock()
}

// wokenByHandOut reports that a read failed only because a hand-out woke
// it (see handOut). c.readMu is held: the hand-out clears waking only once
// it has the lock, so the answer cannot come too late.
func (c *Conn) wokenByHandOut(err error) bool {
	return err != nil && c.waking.Load() && errors.Is(err, os.ErrDeadlineExceeded)
}

// waitHandOut waits for a hand-out under way to end.
func (c *Conn) waitHandOut() {
	c.handMu.Lock()
	//lint:ignore SA2001 the empty critical section is the wait
	c.handMu.Unlock()
}

// startGRO turns GRO on at the Conn's first read, unless Options or the
// environment turned it off or the socket has been handed out. c.readMu is
// held. A hand-out that runs at the same time either sees GRO on and
// switches it off once this read lets go of the lock, or sees it off and
// leaves it to this read, which then sees handedOut.
func (c *Conn) startGRO() {
	if c.opts.DisableGRO || c.handedOut.Load() || !c.setGRO(true) {
		return
	}
	c.groOn.Store(true)
	if c.handedOut.Load() {
		c.stopGRO()
	}
}
