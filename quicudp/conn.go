package quicudp

import (
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"github.com/quic-go/quic-go"
	"github.com/zeroio/zeroio/udp"
	"golang.org/x/net/ipv4"
)

// Conn is a *udp.Conn with the ReadBatch quic-go looks for.
type Conn struct {
	*udp.Conn
	msgs []udp.Message // ReadBatch's scratch; quic-go reads from one goroutine
	// The source of the last datagram read, as quic-go wants it: a flow's
	// datagrams share one *net.UDPAddr instead of allocating one each.
	// quic-go only reads the addresses it is given.
	lastAP   netip.AddrPort
	lastAddr *net.UDPAddr
}

// quic-go reads in batches, with ECN and packet information, only from a
// connection with the methods of a *net.UDPConn (OOBCapablePacketConn);
// it then uses the connection's own ReadBatch where it has one.
var _ quic.OOBCapablePacketConn = (*Conn)(nil)

// New wraps c for quic-go.
func New(c *udp.Conn) *Conn { return &Conn{Conn: c} }

// ReadBatch reads up to len(ms) datagrams with [udp.Conn.ReadBatch], one
// per message, each into ms[i].Buffers[0], with its control messages in
// ms[i].OOB: the ReadBatch of x/net's ipv4.PacketConn, which quic-go calls.
func (c *Conn) ReadBatch(ms []ipv4.Message, _ int) (int, error) {
	if cap(c.msgs) < len(ms) {
		c.msgs = make([]udp.Message, len(ms))
	}
	msgs := c.msgs[:len(ms)]
	for i := range ms {
		var b []byte
		if len(ms[i].Buffers) > 0 {
			b = ms[i].Buffers[0]
		}
		msgs[i] = udp.Message{Buf: b, OOB: ms[i].OOB}
	}
	n, err := c.Conn.ReadBatch(msgs)
	keepBuffers(ms[:n], msgs[:n])
	for i := range msgs[:n] {
		m := &msgs[i]
		ms[i].N, ms[i].NN, ms[i].Flags = m.N, m.NOOB, m.Flags
		if m.Addr != c.lastAP || c.lastAddr == nil {
			c.lastAP, c.lastAddr = m.Addr, net.UDPAddrFromAddrPort(m.Addr)
		}
		ms[i].Addr = c.lastAddr
	}
	clear(msgs)
	return n, err
}

// keepBuffers puts each datagram in the buffer ms[i] gave. udp's ReadBatch
// may exchange the Bufs of its Messages to keep them in order; quic-go
// ties each message to its own buffer (it recycles buffer i with packet
// i), so an exchange is undone by copying. Only batches of more than 64
// messages or of 64 KiB buffers, which quic-go does not use, exchange.
func keepBuffers(ms []ipv4.Message, msgs []udp.Message) {
	moved := false
	for i := range msgs {
		if !sameBuf(msgs[i].Buf, ms[i].Buffers[0]) {
			moved = true
			break
		}
	}
	if !moved {
		return
	}
	held := make([][]byte, len(msgs))
	for i := range msgs {
		held[i] = append([]byte(nil), msgs[i].Buf[:msgs[i].N]...)
	}
	for i := range msgs {
		msgs[i].Buf = ms[i].Buffers[0]
		copy(msgs[i].Buf, held[i])
	}
}

func sameBuf(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// SyscallConn returns a RawConn whose Control sets socket options through
// [udp.Conn.Control], keeping GRO on; its Read and Write hand the socket
// out ([udp.Conn.SyscallConn]), which turns GRO off. quic-go uses only
// Control.
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return rawConn{c.Conn}, nil }

type rawConn struct{ c *udp.Conn }

func (r rawConn) Control(f func(fd uintptr)) error { return r.c.Control(f) }

func (r rawConn) Read(f func(fd uintptr) bool) error {
	rc, err := r.c.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Read(f)
}

func (r rawConn) Write(f func(fd uintptr) bool) error {
	rc, err := r.c.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Write(f)
}
