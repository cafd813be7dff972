package udp

// Tests of the read methods of package net that Conn has: one datagram
// per call, whatever GRO did, and no more allocations than package net's.

import (
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestPacketConn checks the Conn still works as a net.PacketConn.
func TestPacketConn(t *testing.T) {
	a, b := pair(t, "udp4", "127.0.0.1", nil)
	var pc net.PacketConn = a
	if _, err := pc.WriteTo([]byte("std"), b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	in := makeMsgs(1, 16)
	readN(t, b, in, 1, 1)
	if string(in[0].Payload()) != "std" {
		t.Fatalf("got %q", in[0].Payload())
	}
}

// reader is one of the read methods of package net that Conn overrides,
// called on c, with the source address as a netip.AddrPort (or want, for
// Read, which does not tell it) and the MSG_* flags (0 where there are
// none).
type reader struct {
	name string
	read func(c *Conn, b []byte, want netip.AddrPort) (n int, from netip.AddrPort, flags int, err error)
}

var readers = []reader{
	{"ReadFrom", func(c *Conn, b []byte, _ netip.AddrPort) (int, netip.AddrPort, int, error) {
		var pc net.PacketConn = c
		n, addr, err := pc.ReadFrom(b)
		if err != nil {
			return n, netip.AddrPort{}, 0, err
		}
		return n, addr.(*net.UDPAddr).AddrPort(), 0, nil
	}},
	{"ReadFromUDP", func(c *Conn, b []byte, _ netip.AddrPort) (int, netip.AddrPort, int, error) {
		n, addr, err := c.ReadFromUDP(b)
		if err != nil {
			return n, netip.AddrPort{}, 0, err
		}
		return n, addr.AddrPort(), 0, nil
	}},
	{"ReadFromUDPAddrPort", func(c *Conn, b []byte, _ netip.AddrPort) (int, netip.AddrPort, int, error) {
		n, addr, err := c.ReadFromUDPAddrPort(b)
		return n, addr, 0, err
	}},
	{"ReadMsgUDP", func(c *Conn, b []byte, _ netip.AddrPort) (int, netip.AddrPort, int, error) {
		n, _, flags, addr, err := c.ReadMsgUDP(b, nil)
		if err != nil {
			return n, netip.AddrPort{}, 0, err
		}
		return n, addr.AddrPort(), flags, nil
	}},
	{"ReadMsgUDPAddrPort", func(c *Conn, b []byte, _ netip.AddrPort) (int, netip.AddrPort, int, error) {
		n, _, flags, addr, err := c.ReadMsgUDPAddrPort(b, make([]byte, 256))
		return n, addr, flags, err
	}},
	{"Read", func(c *Conn, b []byte, want netip.AddrPort) (int, netip.AddrPort, int, error) {
		var nc net.Conn = c
		n, err := nc.Read(b)
		return n, want, 0, err
	}},
}

// TestPacketConnReadsOneDatagramAtATime sends datagrams as one GSO run,
// which GRO hands to the receiver as one buffer, reads two with ReadBatch,
// which keeps the rest pending, then the others with each read method of
// package net that Conn overrides: each returns one datagram, whole, in
// order. The embedded *net.UDPConn's returned the rest of the buffer as
// one datagram.
func TestPacketConnReadsOneDatagramAtATime(t *testing.T) {
	for _, off := range offloads {
		t.Run(off.name, func(t *testing.T) {
			a, b := pair(t, "udp4", "127.0.0.1", &off.opts)
			const per = 2 // datagrams read by each method
			out := makeMsgs(2+per*len(readers), 100)
			for i := range out {
				out[i].Buf[0] = byte(i)
				out[i].Addr = addrOf(b)
			}
			if _, err := a.WriteAll(out); err != nil {
				t.Fatal(err)
			}
			in := makeMsgs(2, 1500)
			readN(t, b, in, 2, 2)
			next := 2
			b.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 1500)
			for _, r := range readers {
				for range per {
					n, from, flags, err := r.read(b, buf, addrOf(a))
					if err != nil {
						t.Fatalf("%s: %v", r.name, err)
					}
					if n != 100 || buf[0] != byte(next) || from != addrOf(a) || flags&msgTrunc != 0 {
						t.Fatalf("%s: %d bytes [%d] from %v, flags %#x; want 100 [%d] from %v", r.name, n, buf[0], from, flags, next, addrOf(a))
					}
					next++
				}
			}
			if st := b.Stats(); st.GRO && a.Stats().GSO && st.GROReads != 1 {
				t.Fatalf("the datagrams did not arrive as one coalesced buffer: %+v", st)
			}
		})
	}
}

// TestPacketConnReadTruncates reads 100-byte datagrams into 10 bytes with
// each read method: each returns the first 10 bytes of one datagram, the
// next read the next datagram, and ReadMsgUDP and ReadMsgUDPAddrPort set
// MSG_TRUNC, as package net's do.
func TestPacketConnReadTruncates(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("windows fails the read of a datagram larger than the buffer (WSAEMSGSIZE)")
	}
	for _, off := range offloads {
		t.Run(off.name, func(t *testing.T) {
			a, b := pair(t, "udp4", "127.0.0.1", &off.opts)
			out := makeMsgs(len(readers), 100)
			for i := range out {
				out[i].Buf[0] = byte(i)
				out[i].Addr = addrOf(b)
			}
			if _, err := a.WriteAll(out); err != nil {
				t.Fatal(err)
			}
			b.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 10)
			for i, r := range readers {
				n, from, flags, err := r.read(b, buf, addrOf(a))
				if err != nil {
					t.Fatalf("%s: %v", r.name, err)
				}
				wantTrunc := msgTrunc != 0 && strings.HasPrefix(r.name, "ReadMsg")
				if n != 10 || buf[0] != byte(i) || from != addrOf(a) || (flags&msgTrunc != 0) != wantTrunc {
					t.Fatalf("%s: %d bytes [%d] from %v, flags %#x; want 10 [%d] from %v, MSG_TRUNC %v", r.name, n, buf[0], from, flags, i, addrOf(a), wantTrunc)
				}
			}
		})
	}
}

// TestReadMethodAllocs: Conn's versions of package net's read methods
// allocate no more than the *net.UDPConn methods they replace (those that
// return a *net.UDPAddr or net.Addr allocate it, or its IP).
func TestReadMethodAllocs(t *testing.T) {
	skipAllocCheck(t)
	for _, off := range offloads[:2] {
		t.Run(off.name, func(t *testing.T) {
			a, b := pair(t, "udp4", "127.0.0.1", &off.opts)
			out := []Message{{Buf: make([]byte, 100), Addr: addrOf(b)}}
			buf, oob := make([]byte, 1500), make([]byte, 256)
			b.SetReadDeadline(time.Now().Add(10 * time.Second))
			check := func(n int, err error) {
				if n != 100 || err != nil {
					t.Fatalf("read %d bytes, %v", n, err)
				}
			}
			for _, m := range []struct {
				name      string
				conn, std func()
			}{
				{"Read",
					func() { n, err := b.Read(buf); check(n, err) },
					func() { n, err := b.uc.Read(buf); check(n, err) }},
				{"ReadFrom",
					func() { n, _, err := b.ReadFrom(buf); check(n, err) },
					func() { n, _, err := b.uc.ReadFrom(buf); check(n, err) }},
				{"ReadFromUDP",
					func() { n, _, err := b.ReadFromUDP(buf); check(n, err) },
					func() { n, _, err := b.uc.ReadFromUDP(buf); check(n, err) }},
				{"ReadFromUDPAddrPort",
					func() { n, _, err := b.ReadFromUDPAddrPort(buf); check(n, err) },
					func() { n, _, err := b.uc.ReadFromUDPAddrPort(buf); check(n, err) }},
				{"ReadMsgUDP",
					func() { n, _, _, _, err := b.ReadMsgUDP(buf, oob); check(n, err) },
					func() { n, _, _, _, err := b.uc.ReadMsgUDP(buf, oob); check(n, err) }},
				{"ReadMsgUDPAddrPort",
					func() { n, _, _, _, err := b.ReadMsgUDPAddrPort(buf, oob); check(n, err) },
					func() { n, _, _, _, err := b.uc.ReadMsgUDPAddrPort(buf, oob); check(n, err) }},
			} {
				allocs := func(read func()) float64 {
					round := func() {
						if _, err := a.WriteBatch(out); err != nil {
							t.Fatal(err)
						}
						read()
					}
					round()
					return testing.AllocsPerRun(50, round)
				}
				std, conn := allocs(m.std), allocs(m.conn)
				t.Logf("%s: %v allocations, *net.UDPConn's %v", m.name, conn, std)
				if conn > std {
					t.Errorf("%s: %v allocations, *net.UDPConn's %v", m.name, conn, std)
				}
			}
		})
	}
}
