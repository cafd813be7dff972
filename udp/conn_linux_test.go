package udp

// Tests of the Linux Conn: offload state, addresses, options.

import (
	"errors"
	"math"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestOffloadIsUsedAndSplitKeepsMetadata(t *testing.T) {
	opts := &Options{PacketInfo: true, ECN: true, ReadBuffer: bigBuf}
	a, b := pair(t, "udp4", "127.0.0.1", opts)
	needGSO(t, a)
	needGRO(t, b)
	out := makeMsgs(100, 1400)
	for i := range out {
		out[i].Addr = addrOf(b)
		out[i].TOS = 1 // ECT(1)
		out[i].Buf[0] = byte(i)
	}
	out[99].Buf = out[99].Buf[:77]
	if _, err := a.WriteAll(out); err != nil {
		t.Fatal(err)
	}
	in := makeMsgs(100, 1400)
	readN(t, b, in, 100, 30) // leftovers carry over between calls
	for i := range in {
		m := &in[i]
		if m.Addr != addrOf(a) || m.Local != netip.MustParseAddr("127.0.0.1") || m.IfIndex == 0 || m.TOS&3 != 1 || m.Buf[0] != byte(i) || m.N != len(out[i].Buf) {
			t.Fatalf("datagram %d: %+v", i, *m)
		}
	}
	if st := a.Stats(); st.GSOSends == 0 {
		t.Fatalf("no GSO send: %+v", st)
	}
	if st := b.Stats(); st.GROReads == 0 {
		t.Fatalf("no coalesced read: %+v", st)
	}
}

func TestEnvironmentTurnsOffloadOff(t *testing.T) {
	t.Setenv("ZEROIO_UDP_GSO", "0")
	t.Setenv("ZEROIO_UDP_GRO", "0")
	a, _ := pair(t, "udp4", "127.0.0.1", nil)
	if st := a.Stats(); st.GSO || st.GRO {
		t.Fatalf("offload on despite environment: %+v", st)
	}
}

// TestWildcardServerRepliesFromAddressReached binds to a wildcard address,
// is reached at 127.0.0.2 (or ::1), and replies with Local set: the client
// sees the reply come from the address it sent to.
func TestWildcardServerRepliesFromAddressReached(t *testing.T) {
	for _, tc := range []struct{ network, wild, client, target string }{
		{"udp4", "0.0.0.0", "127.0.0.1", "127.0.0.2"},
		{"udp", "::", "127.0.0.1", "127.0.0.3"}, // dual-stack server, IPv4 client
		{"udp6", "::", "::1", "::1"},
	} {
		t.Run(tc.network+"/"+tc.target, func(t *testing.T) {
			for _, off := range offloads[:2] {
				opts := off.opts
				opts.PacketInfo = true
				needListen(t, tc.network, tc.wild)
				needListen(t, "udp", tc.client)
				srv, err := Listen(tc.network, net.JoinHostPort(tc.wild, "0"), &opts)
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Close()
				cli, err := Listen("udp", net.JoinHostPort(tc.client, "0"), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer cli.Close()
				target := netip.AddrPortFrom(netip.MustParseAddr(tc.target), addrOf(srv).Port())
				if _, err := cli.WriteBatch([]Message{{Buf: []byte("ping"), Addr: target}}); err != nil {
					t.Fatal(err)
				}
				in := makeMsgs(1, 64)
				readN(t, srv, in, 1, 1)
				if in[0].Local != target.Addr() {
					t.Fatalf("%s: Local = %v, want %v", off.name, in[0].Local, target.Addr())
				}
				reply := []Message{{Buf: []byte("pong"), Addr: in[0].Addr, Local: in[0].Local}}
				if _, err := srv.WriteBatch(reply); err != nil {
					t.Fatal(err)
				}
				readN(t, cli, in, 1, 1)
				if in[0].Addr != target || string(in[0].Payload()) != "pong" {
					t.Fatalf("%s: reply %q from %v, want from %v", off.name, in[0].Payload(), in[0].Addr, target)
				}
			}
		})
	}
}

// TestTOSOnConnectedDualStack sends Message.TOS from a dual-stack socket
// connected to an IPv4 peer and to an IPv6 one, with Addr spelled out and
// left zero (as a connected socket allows), one datagram and a GSO run:
// the receiver sees the TOS each time. With Addr zero it was sent as
// IPV6_TCLASS alone, which the IPv4 path ignores.
func TestTOSOnConnectedDualStack(t *testing.T) {
	for _, peer := range []struct{ network, addr string }{{"udp4", "127.0.0.1"}, {"udp6", "::1"}} {
		t.Run(peer.network, func(t *testing.T) {
			needListen(t, peer.network, peer.addr)
			rx, err := Listen(peer.network, net.JoinHostPort(peer.addr, "0"), &Options{ECN: true, ReadBuffer: bigBuf})
			if err != nil {
				t.Fatal(err)
			}
			defer rx.Close()
			uc, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv6unspecified}, net.UDPAddrFromAddrPort(rx.AddrPort()))
			if err != nil {
				t.Skipf("no dual-stack socket: %v", err)
			}
			tx, err := NewConn(uc, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Close()
			if tx.sys.family != unix.AF_INET6 {
				t.Skipf("family %d, not AF_INET6", tx.sys.family)
			}
			for _, addr := range []netip.AddrPort{rx.AddrPort(), {}} {
				for _, n := range []int{1, 3} {
					out := makeMsgs(n, 100)
					for i := range out {
						out[i].Addr, out[i].TOS = addr, 2 // ECT(0)
					}
					if _, err := tx.WriteAll(out); err != nil {
						t.Fatalf("Addr=%v n=%d: %v", addr, n, err)
					}
					in := makeMsgs(n, 1500)
					readN(t, rx, in, n, n)
					for i := range in {
						if in[i].TOS&3 != 2 || in[i].N != 100 {
							t.Fatalf("Addr=%v n=%d datagram %d: %d bytes, TOS %#x, want ECT(0)", addr, n, i, in[i].N, in[i].TOS)
						}
					}
				}
			}
		})
	}
}

// TestConnRefusedDoesNotPoisonReads: an ICMP port unreachable for a
// connected socket surfaces once as ECONNREFUSED; later reads work.
func TestConnRefusedDoesNotPoisonReads(t *testing.T) {
	gone, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	peerAddr := gone.LocalAddr().(*net.UDPAddr)
	gone.Close()
	uc, err := net.DialUDP("udp4", nil, peerAddr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewConn(uc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.WriteBatch([]Message{{Buf: []byte("anyone?")}})
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	in := makeMsgs(4, 64)
	_, err = c.ReadBatch(in)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err = %v, want ECONNREFUSED", err)
	}
	// The peer comes back on the same port and talks.
	peer, err := net.ListenUDP("udp4", peerAddr)
	if err != nil {
		t.Skipf("port %d taken meanwhile: %v", peerAddr.Port, err)
	}
	defer peer.Close()
	if _, err := peer.WriteToUDPAddrPort([]byte("back"), addrOf(c)); err != nil {
		t.Fatal(err)
	}
	n, err := c.ReadBatch(in)
	if err != nil || n != 1 || string(in[0].Payload()) != "back" {
		t.Fatalf("read after refusal: %d %v %q", n, err, in[0].Payload())
	}
}

// TestReadMsgUDPControlSpace: Conn's ReadMsgUDP gives the kernel as much
// control space as the caller's oob (control messages enabled through
// SyscallConn past the Conn's own are not cut, and a whole datagram is not
// reported truncated), and an oob too small for what arrived is flagged
// MSG_CTRUNC, both as package net's ReadMsgUDP does.
func TestReadMsgUDPControlSpace(t *testing.T) {
	for _, std := range []bool{true, false} {
		a, b := pair(t, "udp4", "127.0.0.1", &Options{ReadBuffer: bigBuf})
		rc, err := b.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		rc.Control(func(fd uintptr) {
			for _, o := range [][3]int{
				{unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1},
				{unix.SOL_SOCKET, unix.SO_TIMESTAMPING, unix.SOF_TIMESTAMPING_RX_SOFTWARE | unix.SOF_TIMESTAMPING_SOFTWARE},
				{unix.IPPROTO_IP, unix.IP_PKTINFO, 1}, {unix.IPPROTO_IP, unix.IP_RECVTTL, 1},
				{unix.IPPROTO_IP, unix.IP_RECVTOS, 1}, {unix.IPPROTO_IP, unix.IP_RECVORIGDSTADDR, 1},
			} {
				if err := unix.SetsockoptInt(int(fd), o[0], o[1], o[2]); err != nil {
					t.Fatal(err)
				}
			}
		})
		read := func(buf, oob []byte) (n, oobn, flags int) {
			t.Helper()
			b.SetReadDeadline(time.Now().Add(5 * time.Second))
			if std {
				n, oobn, flags, _, err = b.uc.ReadMsgUDP(buf, oob)
			} else {
				n, oobn, flags, _, err = b.ReadMsgUDP(buf, oob)
			}
			if err != nil {
				t.Fatal(err)
			}
			return n, oobn, flags
		}
		for _, size := range []int{1024, 20} {
			out := makeMsgs(1, 100)
			out[0].Addr = addrOf(b)
			if _, err := a.WriteBatch(out); err != nil {
				t.Fatal(err)
			}
			n, oobn, flags := read(make([]byte, 1500), make([]byte, size))
			trunc, ctrunc := flags&unix.MSG_TRUNC != 0, flags&unix.MSG_CTRUNC != 0
			if n != 100 || trunc || ctrunc != (size == 20) {
				t.Errorf("std=%v, oob of %d: n %d, oobn %d, MSG_TRUNC %v, MSG_CTRUNC %v; want 100 bytes, no MSG_TRUNC, MSG_CTRUNC only for the small oob",
					std, size, n, oobn, trunc, ctrunc)
			}
		}
	}
}

// TestSetBuffers: Conn's SetReadBuffer and SetWriteBuffer size an open
// socket as Options do, past net.core.rmem_max and wmem_max where the
// process is privileged.
func TestSetBuffers(t *testing.T) {
	c, err := Listen("udp4", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 16 << 20
	if err := c.SetReadBuffer(n); err != nil {
		t.Fatal(err)
	}
	if err := c.SetWriteBuffer(n); err != nil {
		t.Fatal(err)
	}
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var rcv, snd int
	rc.Control(func(fd uintptr) {
		rcv, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		snd, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
	})
	if unix.Geteuid() == 0 && (rcv < n || snd < n) { // the kernel doubles what it is given
		t.Errorf("as root: SO_RCVBUF %d, SO_SNDBUF %d after asking for %d", rcv, snd, n)
	}
	c.Close()
	if err := c.SetReadBuffer(n); err == nil {
		t.Error("SetReadBuffer on a closed Conn: no error")
	}
}

// kernelGSO probes the kernel for UDP_SEGMENT (Linux 4.18) on a socket of
// package net's, as the Conn probes its own.
func kernelGSO() bool {
	return probeSockopt(func(fd int) error {
		_, err := unix.GetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT)
		return err
	})
}

// kernelGRO probes the kernel for UDP_GRO (Linux 5.0).
func kernelGRO() bool {
	return probeSockopt(func(fd int) error {
		return unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1)
	})
}

func probeSockopt(f func(fd int) error) bool {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return f(fd) == nil
}

// needGSO skips on a kernel without UDP GSO and fails if c, whose Options
// allow GSO, does not use it.
func needGSO(t testing.TB, c *Conn) {
	t.Helper()
	if !kernelGSO() {
		t.Skip("kernel without UDP GSO (UDP_SEGMENT)")
	}
	if st := c.Stats(); !st.GSO {
		t.Fatalf("GSO off on a kernel that has it: %+v", st)
	}
}

// needGRO skips on a kernel without UDP GRO and fails if c, whose Options
// allow GRO and which pair has read from, does not use it.
func needGRO(t testing.TB, c *Conn) {
	t.Helper()
	if !kernelGRO() {
		t.Skip("kernel without UDP GRO (UDP_GRO)")
	}
	if st := c.Stats(); !st.GRO {
		t.Fatalf("GRO off after a read, on a kernel that has it: %+v", st)
	}
}

// TestHugeBufferIsTheLargest: a buffer size past 2 GiB, more than the
// socket option's C int holds, asks for the largest buffer the kernel
// gives, not for the size its low 32 bits make (the smallest, for 3 GiB).
func TestHugeBufferIsTheLargest(t *testing.T) {
	sizes := func(opts *Options, set int) (rcv, snd int) {
		t.Helper()
		c, err := Listen("udp4", "127.0.0.1:0", opts)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if set > 0 {
			if err := c.SetReadBuffer(set); err != nil {
				t.Fatal(err)
			}
			if err := c.SetWriteBuffer(set); err != nil {
				t.Fatal(err)
			}
		}
		c.Control(func(fd uintptr) {
			rcv, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
			snd, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
		})
		return rcv, snd
	}
	// 3 GiB where int holds it; the largest int on 32-bit platforms.
	huge := int(min(3<<30, uint64(math.MaxInt)))
	rcv0, snd0 := sizes(&Options{ReadBuffer: bigBuf, WriteBuffer: bigBuf}, 0)
	for _, tc := range []struct {
		name string
		opts *Options
		set  int
	}{
		{"Options", &Options{ReadBuffer: huge, WriteBuffer: huge}, 0},
		{"SetReadBuffer", nil, huge},
	} {
		if rcv, snd := sizes(tc.opts, tc.set); rcv < rcv0 || snd < snd0 {
			t.Errorf("%s of %d: SO_RCVBUF %d, SO_SNDBUF %d; %d asked for gives %d and %d", tc.name, huge, rcv, snd, bigBuf, rcv0, snd0)
		}
	}
}
