package udp

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Options configures a [Conn]. The zero value (or nil) enables GSO and GRO
// where the kernel supports them (GRO only while the Conn's own reads own
// the socket: see the package doc) and nothing else.
type Options struct {
	// DisableGSO turns off UDP generic segmentation offload on send
	// (UDP_SEGMENT). The environment variable ZEROIO_UDP_GSO=0 does too.
	DisableGSO bool

	// DisableGRO turns off UDP generic receive offload (UDP_GRO). The
	// environment variable ZEROIO_UDP_GRO=0 does too. GRO is turned on by
	// the Conn's first read, and off for good when the socket is handed
	// out ([Conn.SyscallConn], [Conn.File]). With GRO on, reads
	// of datagrams that do not coalesce (many small flows) are as fast as
	// without it only if every Message.Buf holds 65,527 bytes; with smaller
	// buffers they go through internal 64 KiB buffers, at most 8 datagrams
	// per call. Such servers should give 64 KiB buffers or turn GRO off.
	DisableGRO bool

	// PacketInfo reports on read the local address each datagram was sent
	// to and the interface it arrived on (IP_PKTINFO, IPV6_RECVPKTINFO), in
	// [Message.Local] and [Message.IfIndex]. Linux only.
	PacketInfo bool

	// ECN reports on read the TOS / traffic class byte of each datagram
	// (IP_RECVTOS, IPV6_RECVTCLASS) in [Message.TOS]. Linux only.
	ECN bool

	// ReadBuffer and WriteBuffer, if not 0, size the socket's receive and
	// send buffers (SO_RCVBUF / SO_SNDBUF). On Linux SO_RCVBUFFORCE /
	// SO_SNDBUFFORCE are tried first, so that a privileged process can go
	// past net.core.rmem_max / wmem_max.
	ReadBuffer, WriteBuffer int
}

// Stats are a Conn's offload state and counters. Read them with
// [Conn.Stats].
type Stats struct {
	GSO, GRO     bool   // offload in use now (GRO: from the first read until a hand-out)
	GSOSends     uint64 // sends that carried UDP_SEGMENT
	GROReads     uint64 // received buffers that held more than one datagram
	GSOFallbacks uint64 // times GSO was switched off after EIO
}

// Conn is a UDP socket with batched, allocation-free reads and writes. It
// has the methods of the *net.UDPConn it wraps, so it is a [net.Conn] and a
// [net.PacketConn], and fits interfaces written for *net.UDPConn (quic-go's
// OOBCapablePacketConn, x/net's ipv4.NewPacketConn): deadlines apply to
// ReadBatch and WriteBatch, and Close wakes a blocked ReadBatch with an
// error that matches [net.ErrClosed]. Its read methods (Read, ReadFrom,
// ReadFromUDP, ReadFromUDPAddrPort, ReadMsgUDP, ReadMsgUDPAddrPort) read
// one datagram through ReadBatch, so that a GRO buffer is split and
// datagrams a ReadBatch left pending come first. Its write methods are
// those of *net.UDPConn: what they are given is what is sent.
//
// The *net.UDPConn is not embedded: whoever reads the socket outside the
// Conn's methods gets it through [Conn.SyscallConn] or [Conn.File], which
// turn GRO off first (see the package doc).
//
// ReadBatch and WriteBatch may be called at the same time from one reader
// and one writer goroutine, and from more: reads are serialized with each
// other, writes are not (each is one sendmmsg).
type Conn struct {
	uc     *net.UDPConn
	rc     syscall.RawConn
	laddr  net.Addr
	opts   Options
	gso    atomic.Bool
	groOn  atomic.Bool // UDP_GRO is set on the socket
	readMu sync.Mutex  // serializes readers: GRO leftovers live in sys
	// The GRO switch (handout.go): handMu serializes hand-outs; handedOut
	// is set by the first; waking tells a read woken by a hand-out to wait
	// for it and read again.
	handMu    sync.Mutex
	handedOut atomic.Bool
	waking    atomic.Bool
	// dlMu guards rdl, the caller's read deadline, which a hand-out that
	// wakes a blocked read puts back.
	dlMu sync.Mutex
	rdl  time.Time

	gsoSends, groReads, gsoFallbacks atomic.Uint64

	sys sysConn
}

// Listen opens a UDP socket on address ("udp", "udp4" or "udp6" network)
// and wraps it with [NewConn]. opts may be nil.
func Listen(network, address string, opts *Options) (*Conn, error) {
	switch network {
	case "udp", "udp4", "udp6":
	default:
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	la, err := net.ResolveUDPAddr(network, address)
	if err != nil {
		return nil, err
	}
	uc, err := net.ListenUDP(network, la)
	if err != nil {
		return nil, err
	}
	c, err := NewConn(uc, opts)
	if err != nil {
		uc.Close()
		return nil, err
	}
	return c, nil
}

// NewConn wraps uc, which the Conn then owns (closing the Conn closes uc;
// reading uc directly meets the Conn's GRO state, so read through the
// Conn). It probes the socket for GSO and sets the options in opts (nil
// means the zero Options); GRO waits for the first read.
func NewConn(uc *net.UDPConn, opts *Options) (*Conn, error) {
	c := &Conn{uc: uc, laddr: uc.LocalAddr()}
	if opts != nil {
		c.opts = *opts
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	c.rc = rc
	if os.Getenv("ZEROIO_UDP_GSO") == "0" {
		c.opts.DisableGSO = true
	}
	if os.Getenv("ZEROIO_UDP_GRO") == "0" {
		c.opts.DisableGRO = true
	}
	if err := c.setup(); err != nil {
		return nil, c.opError("setsockopt", err)
	}
	return c, nil
}

// AddrPort returns the local address, with an IPv4-mapped address reported
// as IPv4.
func (c *Conn) AddrPort() netip.AddrPort {
	ap := c.laddr.(*net.UDPAddr).AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// Stats returns the Conn's offload state and counters.
func (c *Conn) Stats() Stats {
	return Stats{
		GSO:          c.gso.Load(),
		GRO:          c.groOn.Load(),
		GSOSends:     c.gsoSends.Load(),
		GROReads:     c.groReads.Load(),
		GSOFallbacks: c.gsoFallbacks.Load(),
	}
}

// Read reads one datagram into b: the [net.Conn] Read, for a connected
// Conn. With an empty b it returns at once, as package net's does, rather
// than consume a datagram.
func (c *Conn) Read(b []byte) (int, error) {
	if len(b) == 0 || noMsg {
		// On plan9 only package net's Read works on a connected socket:
		// ReadFrom needs the headers it asks for on listening ones.
		return c.uc.Read(b)
	}
	n, _, _, _, err := c.readOne(b, nil)
	return n, err
}

// ReadFrom reads one datagram into b and returns its size (at most
// len(b)) and source: the [net.PacketConn] ReadFrom.
func (c *Conn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, addr, err := c.readFromUDP(b, &net.UDPAddr{})
	if addr == nil {
		return n, nil, err // a nil net.Addr, not a nil *net.UDPAddr in one
	}
	return n, addr, err
}

// ReadFromUDP acts like [Conn.ReadFrom] but returns a *net.UDPAddr.
func (c *Conn) ReadFromUDP(b []byte) (n int, addr *net.UDPAddr, err error) {
	// Inlined, as package net's is, so that the caller's compiler can keep
	// the UDPAddr off the heap.
	return c.readFromUDP(b, &net.UDPAddr{})
}

func (c *Conn) readFromUDP(b []byte, addr *net.UDPAddr) (int, *net.UDPAddr, error) {
	n, _, _, ap, err := c.readOne(b, nil)
	if err != nil {
		return n, nil, err
	}
	ip := ap.Addr()
	*addr = net.UDPAddr{IP: ip.AsSlice(), Port: int(ap.Port()), Zone: ip.Zone()}
	return n, addr, nil
}

// ReadFromUDPAddrPort acts like [Conn.ReadFrom] but returns a
// [netip.AddrPort].
func (c *Conn) ReadFromUDPAddrPort(b []byte) (n int, addr netip.AddrPort, err error) {
	n, _, _, addr, err = c.readOne(b, nil)
	return n, addr, err
}

// ReadMsgUDP reads one datagram into b and its control messages into oob,
// as [net.UDPConn.ReadMsgUDP] does: it returns the bytes copied into each,
// the MSG_* flags and the source address.
func (c *Conn) ReadMsgUDP(b, oob []byte) (n, oobn, flags int, addr *net.UDPAddr, err error) {
	var ap netip.AddrPort
	n, oobn, flags, ap, err = c.readOne(b, oob)
	if ap.IsValid() {
		addr = net.UDPAddrFromAddrPort(ap)
	}
	return n, oobn, flags, addr, err
}

// ReadMsgUDPAddrPort acts like [Conn.ReadMsgUDP] but returns a
// [netip.AddrPort].
func (c *Conn) ReadMsgUDPAddrPort(b, oob []byte) (n, oobn, flags int, addr netip.AddrPort, err error) {
	return c.readOne(b, oob)
}

// readOne is under Conn's versions of the read methods of *net.UDPConn.
// Those would return the datagrams of a GRO buffer glued together as one,
// and pass over the datagrams a ReadBatch left pending; readOne reads one datagram with a ReadBatch of one Message, the pending
// ones first. A datagram larger than b is cut to fit, as package net does,
// and MSG_TRUNC set in flags. Addresses are reported as by ReadBatch,
// IPv4-mapped ones as IPv4. The Message stays on the stack: readOne
// allocates nothing.
func (c *Conn) readOne(b, oob []byte) (n, oobn, flags int, addr netip.AddrPort, err error) {
	msgs := [1]Message{{Buf: b, OOB: oob}}
	if _, err := c.ReadBatch(msgs[:]); err != nil {
		return 0, 0, 0, netip.AddrPort{}, err
	}
	m := &msgs[0]
	flags = m.Flags
	if m.Truncated {
		flags |= msgTrunc
	}
	return m.N, m.NOOB, flags, m.Addr, nil
}

// noMsg: package net has no ReadMsgUDP or WriteMsgUDP on plan9 (they fail
// with EPLAN9), so datagrams without OOB go through its ReadFromUDPAddrPort
// and WriteToUDPAddrPort (or Write, on a connected socket) there.
const noMsg = runtime.GOOS == "plan9"

// WriteAll writes every message in msgs, calling [Conn.WriteBatch] again
// after a partial write, and returns how many went out. It stops at the
// first error.
func (c *Conn) WriteAll(msgs []Message) (int, error) {
	n := 0
	for n < len(msgs) {
		k, err := c.WriteBatch(msgs[n:])
		n += k
		if err != nil {
			return n, err
		}
		if k == 0 {
			return n, c.opError("write", io.ErrShortWrite)
		}
	}
	return n, nil
}

// opError wraps err for the public API: a raw errno becomes an
// *os.SyscallError named after call, and all of it a *net.OpError. An
// error that RawConn already wrapped (net.ErrClosed, a deadline) keeps its
// cause.
func (c *Conn) opError(call string, err error) error {
	op := "read"
	switch call {
	case "sendmmsg", "sendmsg", "write":
		op = "write"
	case "setsockopt", "getsockopt":
		op = "set"
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	} else {
		err = syscallError(call, err)
	}
	return &net.OpError{Op: op, Net: "udp", Source: c.laddr, Err: err}
}
