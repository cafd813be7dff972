//go:build !linux

package udp

import (
	"errors"
	"net/netip"
)

// sysConn is empty on GOOS other than linux.
type sysConn struct{}

// setup applies the buffer sizes; GSO, GRO, PacketInfo and ECN are
// Linux-only and stay off.
func (c *Conn) setup() error {
	if n := c.opts.ReadBuffer; n > 0 {
		if err := c.uc.SetReadBuffer(n); err != nil {
			return err
		}
	}
	if n := c.opts.WriteBuffer; n > 0 {
		if err := c.uc.SetWriteBuffer(n); err != nil {
			return err
		}
	}
	return nil
}

// ReadBatch reads one datagram into msgs[0] and returns 1: on GOOS other
// than linux there is no recvmmsg, so it is one datagram per call, through
// package net (deadlines and Close behave the same). Local, IfIndex and
// TOS are not reported. A datagram larger than Buf is reported with
// Truncated set where the platform says so (MSG_TRUNC).
func (c *Conn) ReadBatch(msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	c.readMu.Lock()
	defer c.readMu.Unlock()
	m := &msgs[0]
	m.resetRead()
	var n, oobn, flags int
	var addr netip.AddrPort
	var err error
	if noMsg && len(m.OOB) == 0 {
		n, addr, err = c.uc.ReadFromUDPAddrPort(m.Buf)
	} else {
		n, oobn, flags, addr, err = c.uc.ReadMsgUDPAddrPort(m.Buf, m.OOB)
	}
	if err != nil {
		return 0, err
	}
	m.N, m.NOOB, m.Flags = n, oobn, flags
	m.Addr = addrPortUnmap(addr)
	m.Truncated = flags&msgTrunc != 0
	return 1, nil
}

// WriteBatch writes the datagrams in msgs one system call each (GOOS other
// than linux has no sendmmsg or GSO) and returns how many went out. Local
// and TOS are ignored; OOB is passed to the kernel as is.
func (c *Conn) WriteBatch(msgs []Message) (int, error) {
	for i := range msgs {
		m := &msgs[i]
		var n int
		var err error
		switch {
		case noMsg && len(m.OOB) == 0 && !m.Addr.IsValid():
			n, err = c.uc.Write(m.Buf)
		case noMsg && len(m.OOB) == 0:
			n, err = c.uc.WriteToUDPAddrPort(m.Buf, m.Addr)
		default:
			n, _, err = c.uc.WriteMsgUDPAddrPort(m.Buf, m.OOB, m.Addr)
		}
		if err != nil {
			return i, err
		}
		m.N = n
	}
	return len(msgs), nil
}

// addrPortUnmap reports IPv4-mapped IPv6 addresses as IPv4.
func addrPortUnmap(ap netip.AddrPort) netip.AddrPort {
	if ap.Addr().Is4In6() {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return ap
}

// SetReadBuffer sets the socket's receive buffer size (SO_RCVBUF).
func (c *Conn) SetReadBuffer(n int) error { return c.uc.SetReadBuffer(n) }

// SetWriteBuffer sets the socket's send buffer size (SO_SNDBUF).
func (c *Conn) SetWriteBuffer(n int) error { return c.uc.SetWriteBuffer(n) }

// ReadQueued is not supported on GOOS other than linux, where package net
// has no read that does not wait: it returns 0 and [errors.ErrUnsupported].
func (c *Conn) ReadQueued(msgs []Message) (int, error) {
	return 0, errors.ErrUnsupported
}
