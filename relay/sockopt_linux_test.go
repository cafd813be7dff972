package relay

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeroio/zeroio/udp"
	"golang.org/x/sys/unix"
)

// TestSocketOptions checks TCP_NODELAY and keep-alive on both of the
// relay's sockets of a connection, as the route asks: from the start, and
// after a reload from the opposite settings, which keeps the listener (so
// what it was created with must not decide).
func TestSocketOptions(t *testing.T) { forEachEngine(t, testSocketOptions) }

func testSocketOptions(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		nagle                  bool
		keepAlive              time.Duration
		nodelay, keep, idleSec int
	}{
		// No keep-alive unless asked, as HAProxy: no setsockopt at all.
		{"defaults", false, 0, 1, 0, -1},
		{"nagle-keepalive-30s", true, 30 * time.Second, 0, 1, 30},
	} {
		for _, reload := range []bool{false, true} {
			name := tc.name
			if reload {
				name += "-after-reload"
			}
			t.Run(name, func(t *testing.T) {
				b := startBackend(t, "tcp4", echo)
				cfg := route0("127.0.0.1:0", b.addr, func(r *Route) { r.Nagle, r.KeepAlive = tc.nagle, tc.keepAlive })
				if !reload {
					checkSocketOptions(t, startRelay(t, cfg), tc.nodelay, tc.keep, tc.idleSec)
					return
				}
				s := startRelay(t, route0("127.0.0.1:0", b.addr, func(r *Route) {
					r.Nagle, r.KeepAlive = !tc.nagle, 45*time.Second
					if tc.keepAlive > 0 {
						r.KeepAlive = 0
					}
				}))
				if err := s.Update(cfg); err != nil {
					t.Fatal(err)
				}
				checkSocketOptions(t, s, tc.nodelay, tc.keep, tc.idleSec)
			})
		}
	}
}

// checkSocketOptions relays one connection through s's route "r" and
// checks TCP_NODELAY, SO_KEEPALIVE and, if idleSec > 0, TCP_KEEPIDLE on
// both of the relay's sockets.
func checkSocketOptions(t *testing.T, s *Server, nodelay, keep, idleSec int) {
	t.Helper()
	c := dialRoute(t, s, "r")
	defer c.Close()
	if err := ping(c); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	var fds []int
	for _, ci := range testEng(s).inFlight() {
		fds = append(fds, ci.client, ci.target)
	}
	// The sockets stay open while c is: the relay holds them. The options
	// are read under s.mu, so the list is not stale.
	defer s.mu.Unlock()
	if len(fds) != 2 {
		t.Fatalf("%d relay sockets", len(fds))
	}
	for i, fd := range fds {
		nd, _ := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY)
		ka, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE)
		idle, _ := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
		side := []string{"client", "target"}[i%2]
		if nd != nodelay || ka != keep || (idleSec > 0 && idle != idleSec) {
			t.Errorf("%s side: TCP_NODELAY %d SO_KEEPALIVE %d TCP_KEEPIDLE %d; want %d %d %d", side, nd, ka, idle, nodelay, keep, idleSec)
		}
	}
}

// silentTarget returns the address of a TCP listener whose accept queue is
// full, so that a further connect(2) hangs in SYN retransmissions: a
// target that never answers.
func silentTarget(t *testing.T) string {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil { // a queue of one
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*unix.SockaddrInet4).Port}).String()
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp4", addr, 300*time.Millisecond)
		if err != nil {
			return addr // this one hung: the queue is full
		}
		t.Cleanup(func() { c.Close() })
		if i == 10 {
			t.Fatal("accept queue never filled")
		}
	}
}

// TestCloseDuringDial: Close closes every connection at once, also one
// whose dial to the target is in progress, rather than waiting out the
// route's DialTimeout. An aborted dial is not a dial error.
func TestCloseDuringDial(t *testing.T) { forEachEngine(t, testCloseDuringDial) }

func testCloseDuringDial(t *testing.T) {
	leakCheck(t)
	s := startRelay(t, route0("127.0.0.1:0", mustAddr(t, "tcp://"+silentTarget(t)), func(r *Route) { r.DialTimeout = 30 * time.Second }))
	c := dialRoute(t, s, "r")
	defer c.Close()
	waitFor(t, func() bool { // the pair is about to dial, or dialing
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, ci := range testEng(s).inFlight() {
			return ci.dialing
		}
		return false
	})
	time.Sleep(50 * time.Millisecond) // into connect(2)
	start := time.Now()
	s.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v with a dial in progress (DialTimeout 30s)", d.Round(time.Millisecond))
	}
	if !waitClosed(c, 5*time.Second) {
		t.Error("client not closed")
	}
	if st := s.Stats(); st.Active != 0 {
		t.Errorf("%d relays active after Close", st.Active)
	}
}

// TestUDPBuffer checks that a UDP route's listening socket and its
// sessions' upstream sockets get the buffers the route asks for, or the
// default: as much as the kernel grants (it reports twice the size, and
// caps an unprivileged request at net.core.rmem_max and wmem_max). A
// reload resizes the listening socket's buffers in place.
func TestUDPBuffer(t *testing.T) {
	leakCheck(t)
	e := udpEcho(t, "udp4", "127.0.0.1:0")
	for _, tc := range []struct {
		name   string
		want   int
		reload bool
	}{
		{"default", 0, false},
		{"1MiB", 1 << 20, false},
		{"64KiB-after-reload", 64 << 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			cfg := udpRoute0("127.0.0.1:0", e.LocalAddr(), func(r *Route) { r.UDPBuffer = want })
			var s *Server
			if tc.reload {
				s = startRelay(t, udpRoute0("127.0.0.1:0", e.LocalAddr(), nil)) // DefaultUDPBuffer
				if err := s.Update(cfg); err != nil {
					t.Fatal(err)
				}
			} else {
				s = startRelay(t, cfg)
			}
			if want == 0 {
				want = DefaultUDPBuffer
			}
			// One round trip opens a session.
			udpEchoClients(t, "udp4", s.Addrs("u")[0].(*net.UDPAddr), 1, 1, 1)
			s.mu.Lock()
			u := s.routes["u"].udp
			s.mu.Unlock()
			u.mu.Lock()
			conns := map[string]*udp.Conn{"listening": u.lns[0].Conn}
			for _, ss := range u.sessions {
				conns["session"] = ss.up
			}
			u.mu.Unlock()
			if len(conns) != 2 {
				t.Fatal("no session")
			}
			rmax, wmax := sysctlInt(t, "net/core/rmem_max"), sysctlInt(t, "net/core/wmem_max")
			if os.Geteuid() == 0 {
				rmax, wmax = want, want // SO_RCVBUFFORCE, SO_SNDBUFFORCE
			}
			for name, uc := range conns {
				rc, err := uc.SyscallConn()
				if err != nil {
					t.Fatal(err)
				}
				var rcv, snd int
				rc.Control(func(fd uintptr) {
					rcv, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
					snd, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
				})
				if rcv < 2*min(want, rmax) || snd < 2*min(want, wmax) || rcv > 2*want || snd > 2*want {
					t.Errorf("%s socket: SO_RCVBUF %d, SO_SNDBUF %d; want 2x %d, or less down to 2x rmem_max %d, wmem_max %d", name, rcv, snd, want, rmax, wmax)
				}
			}
		})
	}
}

func sysctlInt(t *testing.T, name string) int {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		t.Skip(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
