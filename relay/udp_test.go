package relay

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeroio/zeroio/udp"
)

// udpEcho is a real UDP echo server.
func udpEcho(t testing.TB, network, addr string) *net.UDPConn {
	t.Helper()
	la, err := net.ResolveUDPAddr(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenUDP(network, la)
	if err != nil {
		t.Fatalf("listen %s %s: %v", network, addr, err)
	}
	serveUDP(t, c, func(in []byte) []byte { return in })
	return c
}

// serveUDP answers every datagram c reads with reply(datagram), or with
// nothing where reply returns nil, until the test ends; then it closes c
// and waits for the loop to stop.
func serveUDP(t testing.TB, c *net.UDPConn, reply func(in []byte) []byte) {
	serveUDPFrom(t, c, func(in []byte, _ netip.AddrPort) []byte { return reply(in) })
}

// serveUDPFrom is serveUDP with the sender's address.
func serveUDPFrom(t testing.TB, c *net.UDPConn, reply func(in []byte, from netip.AddrPort) []byte) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if out := reply(buf[:n], from); out != nil {
				c.WriteToUDPAddrPort(out, from)
			}
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
}

// udpEchoClients runs clients concurrent clients against the relay at ra,
// each sending each datagrams (up to maxPad bytes of padding, growing) and
// checking every echo. Each client's socket is connected, so only replies
// from ra arrive. A few losses are allowed on a loaded machine; a wrong
// echo, or more than a tenth lost, fails the test.
func udpEchoClients(t *testing.T, network string, ra *net.UDPAddr, clients, each, maxPad int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for ci := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialUDP(network, nil, ra)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			buf := make([]byte, 2048)
			got := 0
			for i := range each {
				msg := fmt.Appendf(nil, "client %d datagram %d %s", ci, i, bytes.Repeat([]byte{'x'}, i*7%maxPad))
				c.Write(msg)
				c.SetReadDeadline(time.Now().Add(time.Second))
				n, err := c.Read(buf)
				if err != nil {
					continue // loss is possible on a loaded machine; counted below
				}
				if !bytes.Equal(buf[:n], msg) {
					errs <- fmt.Errorf("client %d: got %q, want %q", ci, buf[:min(n, 40)], msg[:min(len(msg), 40)])
					return
				}
				got++
			}
			if got < each*9/10 {
				errs <- fmt.Errorf("client %d: %d of %d echoes", ci, got, each)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func udpRoute0(listen string, target net.Addr, mod func(*Route)) Config {
	r := Route{Name: "u", Listen: Addr{Network: "udp", Address: listen}, Target: Addr{Network: "udp", Address: target.String()}}
	if mod != nil {
		mod(&r)
	}
	return Config{Routes: []Route{r}}
}

func TestUDPRelay(t *testing.T) {
	for _, tc := range []struct{ name, network, listen, echo, dial string }{
		{"ipv4", "udp4", "127.0.0.1:0", "127.0.0.1:0", ""},
		{"ipv6", "udp6", "[::1]:0", "[::1]:0", ""},
		// Bound to the wildcard, reached on 127.0.0.2: replies must come
		// from 127.0.0.2, or the client's connected socket drops them.
		{"reply-from-dest-addr", "udp4", "0.0.0.0:0", "127.0.0.1:0", "127.0.0.2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakCheck(t)
			e := udpEcho(t, tc.network, tc.echo)
			s := startRelay(t, udpRoute0(tc.listen, e.LocalAddr(), nil))
			ra := s.Addrs("u")[0].(*net.UDPAddr)
			if tc.dial != "" {
				ra = &net.UDPAddr{IP: net.ParseIP(tc.dial), Port: ra.Port}
			}
			const clients, each = 8, 200
			udpEchoClients(t, tc.network, ra, clients, each, 1400)
			st := s.Stats().Routes[0]
			if st.SessionsTotal != clients || st.Sessions != clients {
				t.Errorf("sessions %d total %d, want %d", st.Sessions, st.SessionsTotal, clients)
			}
			if st.PacketsUp < clients*each*9/10 || st.PacketsDown < clients*each*9/10 {
				t.Errorf("packets up %d down %d", st.PacketsUp, st.PacketsDown)
			}
		})
	}
}

func TestUDPSessionExpiryAndLimit(t *testing.T) {
	leakCheck(t)
	e := udpEcho(t, "udp4", "127.0.0.1:0")
	const timeout = time.Second
	s := startRelay(t, udpRoute0("127.0.0.1:0", e.LocalAddr(), func(r *Route) {
		r.SessionTimeout, r.MaxSessions = timeout, 2
	}))
	ra := s.Addrs("u")[0].(*net.UDPAddr)
	var cs []*net.UDPConn
	for range 3 {
		c, err := net.DialUDP("udp4", nil, ra)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	echoOK := func(c *net.UDPConn, tries int) bool {
		buf := make([]byte, 16)
		for range tries {
			c.Write([]byte("hi"))
			c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			if n, err := c.Read(buf); err == nil && string(buf[:n]) == "hi" {
				return true
			}
		}
		return false
	}
	if !echoOK(cs[0], 3) || !echoOK(cs[1], 3) {
		t.Fatal("first two clients not relayed")
	}
	if echoOK(cs[2], 1) {
		t.Fatal("third client relayed beyond MaxSessions")
	}
	if st := s.Stats().Routes[0]; st.DropsSessionLimit == 0 || st.Sessions != 2 {
		t.Fatalf("drops %d sessions %d", st.DropsSessionLimit, st.Sessions)
	}
	// A session kept busy outlives the timeout; idle ones expire: the
	// first client keeps talking until the second's session has expired.
	waitFor(t, func() bool {
		if !echoOK(cs[0], 3) {
			t.Fatal("busy session lost")
		}
		return s.Stats().Routes[0].Sessions == 1
	})
	if !echoOK(cs[2], 3) {
		t.Fatal("slot not freed by expiry")
	}
	waitFor(t, func() bool { return s.Stats().Routes[0].Sessions == 0 })
}

// TestUDPTargetComesBack: while nothing listens on the target's port, the
// kernel answers with ICMP port unreachable and the session's socket
// reports ECONNREFUSED. The session must survive it and relay once the
// target is back.
func TestUDPTargetComesBack(t *testing.T) {
	leakCheck(t)
	gone, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	target := gone.LocalAddr().(*net.UDPAddr)
	gone.Close()
	s := startRelay(t, udpRoute0("127.0.0.1:0", target, nil))
	c, err := net.DialUDP("udp4", nil, s.Addrs("u")[0].(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 5 { // each draws an ICMP error on the session's socket
		c.Write([]byte("anyone?"))
		time.Sleep(10 * time.Millisecond)
	}
	udpEcho(t, "udp4", target.String())
	buf := make([]byte, 64)
	echoed := false
	for range 50 {
		c.Write([]byte("back"))
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, err := c.Read(buf); err == nil && string(buf[:n]) == "back" {
			echoed = true
			break
		}
	}
	if !echoed {
		t.Fatal("no reply after the target came back")
	}
	if st := s.Stats().Routes[0]; st.SessionsTotal != 1 {
		t.Errorf("%d sessions opened, want the first one to have survived", st.SessionsTotal)
	}
}

// TestUDPReplyBurst has the target answer one datagram with a burst of
// replies of mixed sizes, up to the largest IPv4 UDP payload, so that the
// session reads many per wake into one buffer: every reply must reach the
// client whole, in order, and unchanged.
func TestUDPReplyBurst(t *testing.T) {
	leakCheck(t)
	sizes := []int{1400, 65507, 3, 9000, 1400, 1400, 2048, 1, 65507, 1500}
	const burst = 100
	reply := func(i int) []byte {
		b := make([]byte, sizes[i%len(sizes)])
		for j := range b {
			b[j] = byte(i*7 + j)
		}
		return b
	}
	tgt, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64)
		for {
			_, from, err := tgt.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			for i := range burst {
				tgt.WriteToUDPAddrPort(reply(i), from)
			}
		}
	}()
	t.Cleanup(func() { tgt.Close(); <-done })
	s := startRelay(t, udpRoute0("127.0.0.1:0", tgt.LocalAddr(), nil))
	c, err := net.DialUDP("udp4", nil, s.Addrs("u")[0].(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadBuffer(DefaultUDPBuffer)
	c.Write([]byte("go"))
	buf := make([]byte, 65536)
	for i := range burst {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			st := s.Stats().Routes[0]
			t.Fatalf("reply %d of %d: %v (relay: %d down, %d dropped on write)", i, burst, err, st.PacketsDown, st.DropsWriteError)
		}
		if want := reply(i); !bytes.Equal(buf[:n], want) {
			t.Fatalf("reply %d: %d bytes, want %d bytes of its own pattern", i, n, len(want))
		}
	}
}

// TestUDPWorkers runs a UDP route on four SO_REUSEPORT sockets: every
// client gets one session and its echoes back from the port it sent to,
// and the kernel spreads the clients over more than one socket.
func TestUDPWorkers(t *testing.T) {
	leakCheck(t)
	if err := reusePortSupported(); err != nil {
		t.Skip(err)
	}
	e := udpEcho(t, "udp4", "127.0.0.1:0")
	s := startRelay(t, udpRoute0("127.0.0.1:0", e.LocalAddr(), func(r *Route) { r.Workers = 4 }))
	as := s.Addrs("u")
	if len(as) != 4 || as[0].String() != as[3].String() {
		t.Fatalf("addrs %v", as)
	}
	const clients = 32
	udpEchoClients(t, "udp4", as[0].(*net.UDPAddr), clients, 20, 64)
	s.mu.Lock()
	u := s.routes["u"].udp
	s.mu.Unlock()
	u.mu.Lock()
	used := map[*udp.Conn]bool{}
	for _, ss := range u.sessions {
		used[ss.ln.Load()] = true
	}
	u.mu.Unlock()
	if len(used) < 2 {
		t.Errorf("%d clients all read by one of %d sockets", clients, len(u.lns))
	}
	if st := s.Stats().Routes[0]; st.SessionsTotal != clients {
		t.Errorf("%d sessions for %d clients", st.SessionsTotal, clients)
	}
}

// udpTagServer is a UDP server on loopback answering every datagram with
// tag, so that a client can tell which target a relay sent it to.
func udpTagServer(t *testing.T, tag string) *net.UDPConn {
	t.Helper()
	return udpTagServerAt(t, tag, "127.0.0.1:0")
}

// dialUDP is a client socket connected to ra, closed when the test ends.
func dialUDP(t *testing.T, ra *net.UDPAddr) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp4", nil, ra)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// askUDP sends a datagram from c and returns the reply, or "" if none
// came within a few tries.
func askUDP(c *net.UDPConn) string {
	buf := make([]byte, 64)
	for range 5 {
		c.Write([]byte("who?"))
		c.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := c.Read(buf); err == nil {
			return string(buf[:n])
		}
	}
	return ""
}

// TestUDPUpdateTarget: after a reload changes a UDP route's target, new
// sessions go to the new target, while a session under way keeps its
// own, so that its client's flow is not cut in two.
func TestUDPUpdateTarget(t *testing.T) {
	leakCheck(t)
	a, b := udpTagServer(t, "A"), udpTagServer(t, "B")
	cfg := udpRoute0("127.0.0.1:0", a.LocalAddr(), nil)
	s := startRelay(t, cfg)
	ra := s.Addrs("u")[0].(*net.UDPAddr)
	dial := func() *net.UDPConn { return dialUDP(t, ra) }
	old := dial()
	if got := askUDP(old); got != "A" {
		t.Fatalf("before the reload: %q", got)
	}
	cfg.Routes[0].Target.Address = b.LocalAddr().String()
	if err := s.Update(cfg); err != nil {
		t.Fatal(err)
	}
	if got := askUDP(dial()); got != "B" {
		t.Errorf("new session after the reload answered by %q, want B", got)
	}
	if got := askUDP(old); got != "A" {
		t.Errorf("session under way answered by %q after the reload, want A", got)
	}
	if st := s.Stats().Routes[0]; st.Target != "udp://"+b.LocalAddr().String() || st.SessionsTotal != 2 {
		t.Errorf("Stats: target %s, %d sessions", st.Target, st.SessionsTotal)
	}
	// A target that does not resolve is down, and the route serves with
	// the others.
	cfg.Routes[0].Target = Addr{}
	cfg.Routes[0].Targets = []Target{{Addr: Addr{Network: "udp", Address: "no-such-host.invalid:53"}, Weight: 1}, {Addr: Addr{Network: "udp", Address: b.LocalAddr().String()}, Weight: 1}}
	if err := s.Update(cfg); err != nil {
		t.Fatalf("Update beside an unresolvable target: %v", err)
	}
	for range 2 {
		if got := askUDP(dial()); got != "B" {
			t.Errorf("new session after the reload answered by %q, want B", got)
		}
	}
}

// TestUDPTwoLocalAddrs: one client socket sends to two of the host's
// addresses of a route bound to the wildcard. Each flow is a session of
// its own, and its replies come from the address it was sent to.
func TestUDPTwoLocalAddrs(t *testing.T) {
	leakCheck(t)
	e := udpEcho(t, "udp4", "127.0.0.1:0")
	s := startRelay(t, udpRoute0("0.0.0.0:0", e.LocalAddr(), nil))
	port := s.Addrs("u")[0].(*net.UDPAddr).Port
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64)
	for round := range 2 {
		for _, ip := range []string{"127.0.0.1", "127.0.0.2"} {
			to := &net.UDPAddr{IP: net.ParseIP(ip), Port: port}
			msg := fmt.Sprintf("round %d to %s", round, ip)
			if _, err := c.WriteToUDP([]byte(msg), to); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				t.Fatalf("%s: %v", msg, err)
			}
			if !from.IP.Equal(to.IP) || from.Port != port || string(buf[:n]) != msg {
				t.Errorf("%s: reply %q from %v", msg, buf[:n], from)
			}
		}
	}
	if st := s.Stats().Routes[0]; st.SessionsTotal != 2 || st.Sessions != 2 {
		t.Errorf("%d sessions, %d in all; want 2, 2", st.Sessions, st.SessionsTotal)
	}
}

// TestUDPSessionEndsUnderBatch: a session can end (expire, idle until just
// then) after the route's reader found it for a client's datagram and
// before the datagram is sent. The datagram must go on through a new
// session rather than be lost on the closed socket. The test plays the
// reader's part for that datagram.
func TestUDPSessionEndsUnderBatch(t *testing.T) {
	leakCheck(t)
	e := udpEcho(t, "udp4", "127.0.0.1:0")
	s := startRelay(t, udpRoute0("127.0.0.1:0", e.LocalAddr(), nil))
	c, rt, found := sessionClient(t, s)
	u := rt.udp
	found.up.Close() // the session ends: it leaves the route, as on expiry
	waitFor(t, func() bool { return s.Stats().Routes[0].Sessions == 0 })
	up := s.Stats().Routes[0].PacketsUp
	u.forward(rt.cfg.Load(), found, []udp.Message{{Buf: []byte("late")}})
	buf := make([]byte, 64)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "late" {
		t.Fatalf("datagram sent as its session ended: echo %q, %v", buf[:n], err)
	}
	if st := s.Stats().Routes[0]; st.DropsWriteError != 0 || st.SessionsTotal != 2 || st.PacketsUp != up+1 {
		t.Errorf("Stats: %d dropped on write, %d sessions, %d packets up; want 0, 2, %d", st.DropsWriteError, st.SessionsTotal, st.PacketsUp, up+1)
	}
}

// TestUDPSessionFoundAsItExpires: a session a reader finds at the moment
// its idle timeout fires is not expiring any more: the datagram gets
// through it and its reply comes back. (The reader's lookup and the
// session's expiry are decided under the same lock; before, the session
// could leave after the reader had found it, and the datagram went to a
// socket about to close, counted as relayed.)
func TestUDPSessionFoundAsItExpires(t *testing.T) {
	leakCheck(t)
	e := udpEcho(t, "udp4", "127.0.0.1:0")
	s := startRelay(t, udpRoute0("127.0.0.1:0", e.LocalAddr(), func(r *Route) { r.SessionTimeout = 100 * time.Millisecond }))
	c, rt, found := sessionClient(t, s)
	u := rt.udp
	u.mu.Lock()
	// The session's deadline fires; it waits for u.mu to decide.
	deadline := time.Now().Add(10 * time.Second)
	for !blockedOnLock("(*session).run") {
		if time.Now().After(deadline) {
			u.mu.Unlock()
			t.Fatal("the session never reached its expiry check")
		}
		time.Sleep(5 * time.Millisecond)
	}
	found.touch(time.Now().UnixNano()) // a reader finds it, as session does
	u.mu.Unlock()
	u.forward(rt.cfg.Load(), found, []udp.Message{{Buf: []byte("late")}})
	buf := make([]byte, 64)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "late" {
		t.Fatalf("datagram sent as its session's deadline fired: echo %q, %v", buf[:n], err)
	}
	if st := s.Stats().Routes[0]; st.SessionsTotal != 1 || st.DropsWriteError != 0 {
		t.Errorf("%d sessions, %d dropped on write; want 1, 0", st.SessionsTotal, st.DropsWriteError)
	}
}

// blockedOnLock reports whether a goroutine running fn waits for a mutex.
func blockedOnLock(fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) && strings.Contains(g, "sync.(*Mutex).Lock") {
			return true
		}
	}
	return false
}

// TestUDPRetryDropCountedOnce: datagrams whose session ended under the
// batch, and that find no room for a new one, are counted once, under the
// session limit, all of them.
func TestUDPRetryDropCountedOnce(t *testing.T) {
	leakCheck(t)
	e := udpEcho(t, "udp4", "127.0.0.1:0")
	s := startRelay(t, udpRoute0("127.0.0.1:0", e.LocalAddr(), func(r *Route) { r.MaxSessions = 1 }))
	ra := s.Addrs("u")[0].(*net.UDPAddr)
	_, rt, found := sessionClient(t, s)
	u := rt.udp
	found.up.Close() // the first client's session ends
	waitFor(t, func() bool { return s.Stats().Routes[0].Sessions == 0 })
	b, err := net.DialUDP("udp4", nil, ra) // b takes the one slot
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got := askUDP(b); got != "who?" {
		t.Fatalf("echo %q", got)
	}
	u.forward(rt.cfg.Load(), found, []udp.Message{{Buf: []byte("late")}, {Buf: []byte("later")}})
	if st := s.Stats().Routes[0]; st.DropsSessionLimit != 2 || st.DropsWriteError != 0 {
		t.Errorf("two datagrams dropped: %d counted at the session limit, %d as write errors; want 2, 0", st.DropsSessionLimit, st.DropsWriteError)
	}
}

// sessionClient dials route "u" of s, has a datagram echoed through it,
// and returns the client, the route and the client's session.
func sessionClient(t *testing.T, s *Server) (*net.UDPConn, *route, *session) {
	t.Helper()
	c, err := net.DialUDP("udp4", nil, s.Addrs("u")[0].(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if got := askUDP(c); got != "who?" {
		t.Fatalf("echo %q", got)
	}
	s.mu.Lock()
	rt := s.routes["u"]
	s.mu.Unlock()
	rt.udp.mu.Lock()
	defer rt.udp.mu.Unlock()
	for _, ss := range rt.udp.sessions {
		if ss.client() == c.LocalAddr().(*net.UDPAddr).AddrPort() {
			return c, rt, ss
		}
	}
	t.Fatal("no session for the client")
	return nil, nil, nil
}
