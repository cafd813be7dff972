package udp

import (
	"net"
	"net/netip"
	"time"
)

// The methods of *net.UDPConn that Conn passes on unchanged. Writes are
// package net's own: a datagram given to WriteTo or Write goes out as it
// is, and WriteMsgUDP sends the caller's control messages (a UDP_SEGMENT
// message included) and nothing the Conn adds. Only [Conn.WriteBatch]
// coalesces with GSO, and it sets no socket-wide option that would change
// what the others send.

// Close closes the socket. A blocked read or write returns an error that
// matches [net.ErrClosed].
func (c *Conn) Close() error { return c.uc.Close() }

// LocalAddr returns the local address, a *net.UDPAddr.
func (c *Conn) LocalAddr() net.Addr { return c.uc.LocalAddr() }

// RemoteAddr returns the address a connected Conn is connected to, or nil.
func (c *Conn) RemoteAddr() net.Addr { return c.uc.RemoteAddr() }

// SetDeadline sets the read and write deadlines, as [net.Conn] does.
func (c *Conn) SetDeadline(t time.Time) error {
	c.dlMu.Lock()
	defer c.dlMu.Unlock()
	c.rdl = t
	return c.uc.SetDeadline(t)
}

// SetReadDeadline sets the deadline of ReadBatch and the read methods.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.dlMu.Lock()
	defer c.dlMu.Unlock()
	c.rdl = t
	return c.uc.SetReadDeadline(t)
}

// SetWriteDeadline sets the deadline of WriteBatch and the write methods.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.uc.SetWriteDeadline(t) }

// Write sends b as one datagram on a connected Conn.
func (c *Conn) Write(b []byte) (int, error) { return c.uc.Write(b) }

// WriteTo sends b as one datagram to addr: the [net.PacketConn] WriteTo.
func (c *Conn) WriteTo(b []byte, addr net.Addr) (int, error) { return c.uc.WriteTo(b, addr) }

// WriteToUDP acts like [Conn.WriteTo] but takes a *net.UDPAddr.
func (c *Conn) WriteToUDP(b []byte, addr *net.UDPAddr) (int, error) {
	return c.uc.WriteToUDP(b, addr)
}

// WriteToUDPAddrPort acts like [Conn.WriteTo] but takes a [netip.AddrPort].
func (c *Conn) WriteToUDPAddrPort(b []byte, addr netip.AddrPort) (int, error) {
	return c.uc.WriteToUDPAddrPort(b, addr)
}

// WriteMsgUDP sends b with the control messages in oob to addr (nil on a
// connected Conn), as [net.UDPConn.WriteMsgUDP] does.
func (c *Conn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	return c.uc.WriteMsgUDP(b, oob, addr)
}

// WriteMsgUDPAddrPort acts like [Conn.WriteMsgUDP] but takes a
// [netip.AddrPort].
func (c *Conn) WriteMsgUDPAddrPort(b, oob []byte, addr netip.AddrPort) (n, oobn int, err error) {
	return c.uc.WriteMsgUDPAddrPort(b, oob, addr)
}
