package relay

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/zeroio/zeroio/udp"
	"golang.org/x/sys/unix"
)

// TestUDPStaleRefusalLosesNoBatch: a session's socket holds the refusal
// (ICMP port unreachable) that an earlier datagram drew, and the route's
// reader forwards a batch of the client's datagrams before the session's
// own read has collected it. The kernel reports the refusal on that send
// and sends nothing of it; the refusal says nothing of these datagrams.
// They must go on: to the same target when it is the route's only one
// (it may be back by now), or through a new session to another target.
// The whole batch was dropped.
func TestUDPStaleRefusalLosesNoBatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		other bool // the route has a second target
	}{{"one target", false}, {"failover", true}} {
		t.Run(tc.name, func(t *testing.T) {
			leakCheck(t)
			dead := freeUDPPort(t)
			targets := []Target{{Addr: Addr{"udp", dead.String()}, Weight: 1}}
			var other *net.UDPConn
			if tc.other {
				var err error
				if other, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
					t.Fatal(err)
				}
				defer other.Close()
				targets = append(targets, Target{Addr: Addr{"udp", other.LocalAddr().String()}, Weight: 1})
			}
			s := startRelay(t, Config{Routes: []Route{{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"}, Targets: targets}}})
			c := dialUDP(t, s.Addrs("u")[0].(*net.UDPAddr))
			s.mu.Lock()
			rt := s.routes["u"]
			s.mu.Unlock()
			u := rt.udp

			// The session the reader found, on the dead target, with the
			// refusal of an earlier datagram pending on its socket. The
			// test plays the reader: no session goroutine collects it.
			up, rc, err := openUpstream(&udpTarget{network: "udp4", addr: dead.AddrPort()}, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer up.Close()
			sess := &session{u: u, b: rt.targets().bs[0], up: up, rc: rc}
			sess.peer.Store(&peer{client: c.LocalAddr().(*net.UDPAddr).AddrPort()})
			sess.ln.Store(u.first.Load())
			if _, err := up.Write([]byte("refused")); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return pendingError(t, up) })

			// Where the batch should land: the target back on its port,
			// or the route's other target.
			want := other
			if !tc.other {
				if want, err = net.ListenUDP("udp4", dead); err != nil {
					t.Skipf("the dead target's port was taken meanwhile: %v", err)
				}
				defer want.Close()
			}
			batch := []udp.Message{{Buf: []byte("one")}, {Buf: []byte("two")}, {Buf: []byte("three")}}
			u.forward(rt.cfg.Load(), sess, batch)
			buf := make([]byte, 64)
			for _, m := range batch {
				want.SetReadDeadline(time.Now().Add(5 * time.Second))
				n, _, err := want.ReadFrom(buf)
				if err != nil {
					t.Fatalf("waiting for %q: %v (stats %+v)", m.Buf, err, s.Stats().Routes[0])
				}
				if string(buf[:n]) != string(m.Buf) {
					t.Fatalf("got %q, want %q", buf[:n], m.Buf)
				}
			}
			if st := s.Stats().Routes[0]; st.DropsWriteError != 0 || st.PacketsUp != 3 {
				t.Errorf("Stats: %d dropped on write, %d relayed; want 0, 3", st.DropsWriteError, st.PacketsUp)
			}
		})
	}
}

// pendingError reports whether c's socket holds an error (SO_ERROR) to
// report, without collecting it: poll(2) shows it as POLLERR.
func pendingError(t *testing.T, c *udp.Conn) bool {
	var revents int16
	if err := c.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd)}}
		if _, err := unix.Poll(fds, 0); err == nil {
			revents = fds[0].Revents
		}
	}); err != nil {
		t.Fatal(err)
	}
	return revents&unix.POLLERR != 0
}

// TestUDPSessionOutlivesFragmentationNeeded: an ICMP fragmentation
// needed from a router on the way to the target (path MTU discovery,
// which a socket does by default: IP_PMTUDISC_WANT, ip(7)) makes the next
// call on the session's connected socket fail with EMSGSIZE, once; the
// kernel fragments to the new path MTU from then on. The session must go
// on: it ended, as on an unknown error, with a warning, and the client's
// next datagram opened another, so the target saw the flow come from
// another port.
func TestUDPSessionOutlivesFragmentationNeeded(t *testing.T) {
	testUDPSessionOutlivesICMP(t, 3, 4)
}

// TestUDPSessionOutlivesParameterProblem: as for fragmentation needed,
// an ICMP parameter problem (EPROTO on the session's socket, once) from
// the path leaves the session as it is.
func TestUDPSessionOutlivesParameterProblem(t *testing.T) {
	testUDPSessionOutlivesICMP(t, 12, 0)
}

func testUDPSessionOutlivesICMP(t *testing.T, typ, code byte) {
	leakCheck(t)
	// A loopback address of its own: the path MTU the ICMP message
	// sets is the kernel's for the whole host, for ten minutes, and
	// must not touch other tests' traffic.
	ip := netip.AddrFrom4([4]byte{127, byte(1 + rand.IntN(250)), byte(1 + rand.IntN(250)), byte(2 + rand.IntN(250))})
	target, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	s := startRelay(t, Config{Routes: []Route{{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"}, Target: Addr{"udp", target.LocalAddr().String()}}}})
	c := dialUDP(t, s.Addrs("u")[0].(*net.UDPAddr))
	if _, err := c.Write([]byte("one")); err != nil {
		t.Fatal(err)
	}
	from := recvFrom(t, target, "one")
	injectICMP(t, from, target.LocalAddr().(*net.UDPAddr).AddrPort(), typ, code, 65000)
	// The session's read takes the error at once: give it the time to
	// end, as it did, before the client sends again.
	for deadline := time.Now().Add(300 * time.Millisecond); s.Stats().Routes[0].Sessions == 1 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := c.Write([]byte("two")); err != nil {
		t.Fatal(err)
	}
	if again := recvFrom(t, target, "two"); again != from {
		t.Errorf("the flow moved from %v to %v after ICMP type %d code %d", from, again, typ, code)
	}
	if st := s.Stats().Routes[0]; st.SessionsTotal != 1 {
		t.Errorf("%d sessions for one client, want 1", st.SessionsTotal)
	}
}

// injectFragNeeded sends to the loopback an ICMP fragmentation needed
// (next-hop MTU mtu) that quotes a UDP datagram from src to dst, as a
// router on the path would: the connected socket at src takes it as
// EMSGSIZE (udp_err). It needs a raw socket (CAP_NET_RAW) and skips the
// test without one.
func injectFragNeeded(t *testing.T, src, dst netip.AddrPort, mtu uint16) {
	injectICMP(t, src, dst, 3, 4, mtu) // destination unreachable, fragmentation needed
}

// injectICMP sends to the loopback an ICMP message of type typ and code
// code (for fragmentation needed, next-hop MTU mtu) that quotes a UDP
// datagram of mtu+1 bytes from src to dst.
func injectICMP(t *testing.T, src, dst netip.AddrPort, typ, code byte, mtu uint16) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
	if err != nil {
		t.Skipf("no raw ICMP socket: %v", err)
	}
	defer unix.Close(fd)
	pkt := make([]byte, 8+20+8)
	pkt[0], pkt[1] = typ, code
	binary.BigEndian.PutUint16(pkt[6:], mtu)
	ip := pkt[8:28]
	ip[0], ip[6], ip[8], ip[9] = 0x45, 0x40, 64, unix.IPPROTO_UDP // DF set
	binary.BigEndian.PutUint16(ip[2:], uint16(mtu)+1)
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:16], s4[:])
	copy(ip[16:20], d4[:])
	binary.BigEndian.PutUint16(ip[10:], inetChecksum(ip))
	uh := pkt[28:]
	binary.BigEndian.PutUint16(uh[0:], src.Port())
	binary.BigEndian.PutUint16(uh[2:], dst.Port())
	binary.BigEndian.PutUint16(uh[4:], mtu+1-20)
	binary.BigEndian.PutUint16(pkt[2:], inetChecksum(pkt))
	if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: s4}); err != nil {
		t.Fatal(err)
	}
}

// inetChecksum is the Internet checksum of b (RFC 1071).
func inetChecksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// TestUDPStaleFragNeededLosesNoBatch: as TestUDPStaleRefusalLosesNoBatch,
// for an ICMP fragmentation needed pending on the session's socket: the
// send it fails (EMSGSIZE) sent nothing, and the batch must go on. It
// was dropped whole.
func TestUDPStaleFragNeededLosesNoBatch(t *testing.T) {
	leakCheck(t)
	// A loopback address of its own, as in
	// TestUDPSessionOutlivesFragmentationNeeded.
	ip := netip.AddrFrom4([4]byte{127, byte(1 + rand.IntN(250)), byte(1 + rand.IntN(250)), byte(2 + rand.IntN(250))})
	target, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	tAddr := target.LocalAddr().(*net.UDPAddr).AddrPort()
	s := startRelay(t, Config{Routes: []Route{{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"}, Target: Addr{"udp", tAddr.String()}}}})
	c := dialUDP(t, s.Addrs("u")[0].(*net.UDPAddr))
	s.mu.Lock()
	rt := s.routes["u"]
	s.mu.Unlock()
	u := rt.udp
	// The session the reader found; the test plays the reader, and no
	// session goroutine collects the error.
	up, rc, err := openUpstream(&udpTarget{network: "udp4", addr: tAddr}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	sess := &session{u: u, b: rt.targets().bs[0], up: up, rc: rc}
	sess.peer.Store(&peer{client: c.LocalAddr().(*net.UDPAddr).AddrPort()})
	sess.ln.Store(u.first.Load())
	injectFragNeeded(t, up.AddrPort(), tAddr, 65000)
	waitFor(t, func() bool { return pendingError(t, up) })
	// Sizes that GSO does not coalesce: each goes out as a datagram
	// of its own, which a pending error fails without GSO's retry.
	batch := []udp.Message{{Buf: []byte("one")}, {Buf: []byte("three")}, {Buf: []byte("two")}}
	u.forward(rt.cfg.Load(), sess, batch)
	buf := make([]byte, 64)
	for _, m := range batch {
		target.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _, err := target.ReadFrom(buf)
		if err != nil {
			t.Fatalf("waiting for %q: %v (stats %+v)", m.Buf, err, s.Stats().Routes[0])
		}
		if string(buf[:n]) != string(m.Buf) {
			t.Fatalf("got %q, want %q", buf[:n], m.Buf)
		}
	}
	if st := s.Stats().Routes[0]; st.DropsWriteError != 0 || st.PacketsUp != 3 {
		t.Errorf("Stats: %d dropped on write, %d relayed; want 0, 3", st.DropsWriteError, st.PacketsUp)
	}
}

// TestUDPAdminProhibitedIsARefusal: a firewall that rejects the session's
// datagrams to an IPv6 target answers ICMPv6 administratively prohibited
// (firewalld's default reject), which a connected socket reports as
// EACCES (icmpv6_err_convert), as IPv4's ICMP host prohibited is
// reported as ECONNREFUSED. It is the target refusing: the target is
// marked down and, with one target, the session goes on. It was taken
// for an unknown error: the session ended with a warning, for every
// datagram the firewall rejected, and the target never went down.
func TestUDPAdminProhibitedIsARefusal(t *testing.T) {
	testUDPRefusal(t, "udp6", func(from, to netip.AddrPort) {
		injectICMPv6(t, from, to, 1, 1) // destination unreachable, administratively prohibited
	})
}

// TestUDPProtocolUnreachableIsARefusal: a target host without UDP
// answers ICMP protocol unreachable, which a connected socket reports as
// ENOPROTOOPT (icmp_err_convert): the target refusing, as for port
// unreachable.
func TestUDPProtocolUnreachableIsARefusal(t *testing.T) {
	testUDPRefusal(t, "udp4", func(from, to netip.AddrPort) {
		injectICMP(t, from, to, 3, 2, 100) // destination unreachable, protocol unreachable
	})
}

// testUDPRefusal has inject answer a session's first datagram with an
// ICMP error that refuses it, and checks that the target is marked down
// and, as it is the route's one target, the session goes on.
func testUDPRefusal(t *testing.T, network string, inject func(from, to netip.AddrPort)) {
	leakCheck(t)
	loopback := net.IPv4(127, 0, 0, 1)
	if network == "udp6" {
		loopback = net.IPv6loopback
	}
	target, err := net.ListenUDP(network, &net.UDPAddr{IP: loopback})
	if err != nil {
		t.Skipf("no %s: %v", network, err)
	}
	defer target.Close()
	tAddr := target.LocalAddr().(*net.UDPAddr).AddrPort()
	listen := netip.AddrPortFrom(tAddr.Addr(), 0).String()
	s := startRelay(t, Config{Routes: []Route{{Name: "u", Listen: Addr{"udp", listen}, Target: Addr{"udp", tAddr.String()}}}})
	c, err := net.DialUDP(network, nil, s.Addrs("u")[0].(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("one")); err != nil {
		t.Fatal(err)
	}
	from := recvFrom(t, target, "one")
	inject(from, tAddr)
	waitFor(t, func() bool { return s.Stats().Routes[0].Targets[0].DialErrors > 0 })
	if _, err := c.Write([]byte("two")); err != nil {
		t.Fatal(err)
	}
	if again := recvFrom(t, target, "two"); again != from {
		t.Errorf("the flow moved from %v to %v after a refusal", from, again)
	}
	if st := s.Stats().Routes[0]; st.SessionsTotal != 1 {
		t.Errorf("%d sessions for one client, want 1", st.SessionsTotal)
	}
}

// recvFrom reads a datagram on target, failing the test unless it is
// want, and returns its source.
func recvFrom(t *testing.T, target *net.UDPConn, want string) netip.AddrPort {
	t.Helper()
	buf := make([]byte, 64)
	target.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, from, err := target.ReadFromUDPAddrPort(buf)
	if err != nil || string(buf[:n]) != want {
		t.Fatalf("target got %q, %v; want %q", buf[:n], err, want)
	}
	return from
}

// injectICMPv6 sends to src an ICMPv6 error of type typ and code that
// quotes a UDP datagram from src to dst, as a router or firewall on the
// path would. The kernel computes the checksum of a raw ICMPv6 socket's
// messages (RFC 3542). It needs CAP_NET_RAW and skips the test without.
func injectICMPv6(t *testing.T, src, dst netip.AddrPort, typ, code byte) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
	if err != nil {
		t.Skipf("no raw ICMPv6 socket: %v", err)
	}
	defer unix.Close(fd)
	pkt := make([]byte, 8+40+8)
	pkt[0], pkt[1] = typ, code
	ip := pkt[8:48]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], 8+3)
	ip[6], ip[7] = unix.IPPROTO_UDP, 64
	s16, d16 := src.Addr().As16(), dst.Addr().As16()
	copy(ip[8:24], s16[:])
	copy(ip[24:40], d16[:])
	uh := pkt[48:]
	binary.BigEndian.PutUint16(uh[0:], src.Port())
	binary.BigEndian.PutUint16(uh[2:], dst.Port())
	binary.BigEndian.PutUint16(uh[4:], 8+3)
	if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet6{Addr: s16}); err != nil {
		t.Fatal(err)
	}
}
