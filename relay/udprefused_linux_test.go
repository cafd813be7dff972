package relay

import (
	"net"
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
			targets := []Target{{Addr{"udp", dead.String()}, 1}}
			var other *net.UDPConn
			if tc.other {
				var err error
				if other, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
					t.Fatal(err)
				}
				defer other.Close()
				targets = append(targets, Target{Addr{"udp", other.LocalAddr().String()}, 1})
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
			sess := &session{u: u, b: rt.targets().bs[0], client: c.LocalAddr().(*net.UDPAddr).AddrPort(), up: up, rc: rc}
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
