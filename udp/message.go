package udp

import (
	"net/netip"
)

// Message is one datagram in a [Conn.ReadBatch] or [Conn.WriteBatch].
//
// On read the caller sets Buf (and optionally OOB); the call sets the rest.
// On write the caller sets Buf, Addr and optionally Local, TOS and OOB; the
// call sets N.
type Message struct {
	// Buf holds the payload. On read it is the buffer to fill: the datagram
	// is Buf[:N]. On write it is the whole datagram.
	Buf []byte

	// OOB is optional raw control data. On read, when not nil, the control
	// messages the kernel returned are copied into it (OOB[:NOOB]); the
	// fields below are filled either way. Each datagram split out of a GRO
	// buffer gets the whole buffer's control messages, its UDP_GRO
	// segment size included. On write it is appended to the
	// control messages the Conn builds itself.
	OOB []byte

	// Addr is the source of a read datagram, or the destination of a
	// written one (may be the zero AddrPort on a connected socket).
	// IPv4-mapped IPv6 addresses are reported as IPv4.
	Addr netip.AddrPort

	// Local is, on read with [Options.PacketInfo], the local address the
	// datagram was sent to (IP_PKTINFO / IPV6_PKTINFO), so a server bound to
	// a wildcard address can reply from the address it was reached on. On
	// write, if valid, the source address to send from.
	Local netip.Addr

	// IfIndex is the interface the datagram arrived on ([Options.PacketInfo]).
	// On write, if not 0, the interface to send from (used with Local).
	IfIndex int

	// TOS is the IPv4 TOS / IPv6 traffic class byte; its low two bits are
	// the ECN codepoint. Reported on read with [Options.ECN]; on write, if
	// not 0, sent as IP_TOS / IPV6_TCLASS.
	TOS uint8

	// N is the number of payload bytes read into Buf, or written from it.
	N int

	// NOOB is the number of control bytes copied into OOB on read.
	NOOB int

	// Flags holds the MSG_* flags recvmsg(2) returned (0 on other GOOS).
	Flags int

	// Truncated reports that the datagram was larger than Buf: only its
	// first N bytes were kept, and the rest is lost. A truncated datagram is
	// never reported as whole. With MSG_CTRUNC in Flags it may also mean
	// that a GRO buffer could not be split (see [Conn.ReadBatch]).
	Truncated bool
}

// Payload returns Buf[:N].
func (m *Message) Payload() []byte { return m.Buf[:m.N] }

// resetRead clears what a read fills in.
func (m *Message) resetRead() {
	m.Addr = netip.AddrPort{}
	m.Local = netip.Addr{}
	m.IfIndex, m.TOS, m.N, m.NOOB, m.Flags, m.Truncated = 0, 0, 0, 0, 0, false
}
