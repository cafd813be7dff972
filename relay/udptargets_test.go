package relay

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"
)

// TestUDPTargetsPinned: each UDP session stays on the target it was given
// (a client's flow is never split), and sessions spread over the targets.
func TestUDPTargetsPinned(t *testing.T) {
	leakCheck(t)
	a, b := udpTagServer(t, "A"), udpTagServer(t, "B")
	s := startRelay(t, Config{Routes: []Route{{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"},
		Targets: []Target{{Addr: Addr{"udp", a.LocalAddr().String()}, Weight: 1}, {Addr: Addr{"udp", b.LocalAddr().String()}, Weight: 1}}}}})
	ra := s.Addrs("u")[0].(*net.UDPAddr)
	seen := map[string]int{}
	for range 4 {
		c, err := net.DialUDP("udp4", nil, ra)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		first := askUDP(c)
		if first == "" {
			t.Fatal("no answer")
		}
		for range 5 {
			if got := askUDP(c); got != first {
				t.Fatalf("session moved from %s to %s", first, got)
			}
		}
		seen[first]++
	}
	if seen["A"] != 2 || seen["B"] != 2 {
		t.Fatalf("sessions per target %v, want 2 each", seen)
	}
}

// TestUDPTargetRefusedFailover: a target that refuses (ICMP port
// unreachable, ECONNREFUSED on the session's socket) is marked down and
// the session's next datagrams go to another target.
func TestUDPTargetRefusedFailover(t *testing.T) {
	leakCheck(t)
	b := udpTagServer(t, "B")
	dead, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.LocalAddr().String()
	dead.Close()
	s := startRelay(t, Config{Routes: []Route{{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"},
		Targets: []Target{{Addr: Addr{"udp", deadAddr}, Weight: 1}, {Addr: Addr{"udp", b.LocalAddr().String()}, Weight: 1}}}}})
	ra := s.Addrs("u")[0].(*net.UDPAddr)
	for i := range 4 {
		c, err := net.DialUDP("udp4", nil, ra)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// askUDP sends again when no answer comes: the datagram the
		// dead target refused is lost, the next goes to B.
		if got := askUDP(c); got != "B" {
			t.Fatalf("client %d answered by %q, want B", i, got)
		}
	}
	// Its mark lasts minBackoff, about as long as askUDP waits before
	// sending again: whether it is still down by now is a matter of
	// timing, the refusal it was marked down for is not.
	if st := s.Stats().Routes[0].Targets[0]; st.DialErrors == 0 {
		t.Fatalf("refusing target: %+v, want a refusal counted", st)
	}
}

// TestUDPLeastConnCountsSessions: a UDP session is its target's
// connection, so least-conn spreads sessions by weight, and the targets'
// counters show them while they last.
func TestUDPLeastConnCountsSessions(t *testing.T) {
	leakCheck(t)
	a, b := udpTagServer(t, "A"), udpTagServer(t, "B")
	s := startRelay(t, Config{Routes: []Route{{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"}, Balance: LeastConn,
		SessionTimeout: 500 * time.Millisecond,
		Targets:        []Target{{Addr: Addr{"udp", a.LocalAddr().String()}, Weight: 1}, {Addr: Addr{"udp", b.LocalAddr().String()}, Weight: 3}}}}})
	ra := s.Addrs("u")[0].(*net.UDPAddr)
	seen := map[string]int{}
	for range 8 {
		seen[askUDP(dialUDP(t, ra))]++
	}
	if seen["A"] != 2 || seen["B"] != 6 {
		t.Fatalf("sessions per target %v, want A 2 and B 6 (weights 1 and 3)", seen)
	}
	ts := s.Stats().Routes[0].Targets
	for i, want := range []int64{2, 6} {
		if ts[i].Active != want || ts[i].Connections != uint64(want) {
			t.Errorf("target %s: %d active, %d in all; want %d", ts[i].Addr, ts[i].Active, ts[i].Connections, want)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ts := s.Stats().Routes[0].Targets
		if ts[0].Active == 0 && ts[1].Active == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions expired, targets still count them: %+v", ts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUDPTargetThatIsTheRelay: a target whose name resolves to the
// route's own listen address is caught when a session's socket opens to
// it: it is marked down and the client goes to another target. Sending
// there would bring each datagram back as a new client's, opening
// sessions until the route had none left.
func TestUDPTargetThatIsTheRelay(t *testing.T) {
	leakCheck(t)
	e := udpTagServer(t, "E")
	ra := freeUDPPort(t)
	oldLookup := lookupNetIP
	lookupNetIP = func(ctx context.Context, network, host string) ([]netip.Addr, error) {
		if host == "self.test" {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		return oldLookup(ctx, network, host)
	}
	t.Cleanup(func() { lookupNetIP = oldLookup })
	// Route u has another target; route v only itself.
	rv := freeUDPPort(t)
	self := net.JoinHostPort("self.test", strconv.Itoa(ra.Port))
	s := startRelay(t, Config{Routes: []Route{
		{Name: "u", Listen: Addr{"udp", ra.String()}, MaxSessions: 50,
			Targets: []Target{{Addr: Addr{"udp", self}, Weight: 1}, {Addr: Addr{"udp", e.LocalAddr().String()}, Weight: 1}}},
		{Name: "v", Listen: Addr{"udp", rv.String()}, MaxSessions: 50,
			Target: Addr{"udp", net.JoinHostPort("self.test", strconv.Itoa(rv.Port))}},
	}})
	const clients = 4
	for i := range clients {
		if got := askUDP(dialUDP(t, ra)); got != "E" {
			t.Fatalf("client %d answered by %q, want E", i, got)
		}
	}
	st := s.Stats().Routes[0]
	if st.SessionsTotal != clients {
		t.Errorf("%d sessions opened for %d clients", st.SessionsTotal, clients)
	}
	if tg := st.Targets[0]; tg.Up || tg.DialErrors == 0 {
		t.Errorf("target %s, the relay itself: %+v; want it down, with the loop counted", self, tg)
	}
	if _, err := dialUDP(t, rv).Write([]byte("loop?")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for st = s.Stats().Routes[1]; st.DropsWriteError == 0 && time.Now().Before(deadline); st = s.Stats().Routes[1] {
		time.Sleep(10 * time.Millisecond)
	}
	if st.DropsWriteError != 1 || st.SessionsTotal != 0 {
		t.Errorf("route v, whose only target is itself: %d sessions opened, %d datagrams dropped; want none opened, 1 dropped", st.SessionsTotal, st.DropsWriteError)
	}
}

// TestUDPSessionLeavesRemovedTargetThatRefuses: a reload moves a UDP
// route's only target, and the old one goes away. The session under way
// kept the old target; the refusal that comes back must end it, so that
// the client's next datagrams open a session on the route's target. It
// stayed on the removed target instead, because the route has only one
// target, and every datagram of a client that never went quiet for the
// session timeout was lost for good.
func TestUDPSessionLeavesRemovedTargetThatRefuses(t *testing.T) {
	leakCheck(t)
	a, b := udpTagServer(t, "A"), udpTagServer(t, "B")
	cfg := udpRoute0("127.0.0.1:0", a.LocalAddr(), nil)
	s := startRelay(t, cfg)
	c := dialUDP(t, s.Addrs("u")[0].(*net.UDPAddr))
	if got := askUDP(c); got != "A" {
		t.Fatalf("before the reload: %q", got)
	}
	cfg.Routes[0].Target.Address = b.LocalAddr().String()
	if err := s.Update(cfg); err != nil {
		t.Fatal(err)
	}
	a.Close() // the old target is gone: it answers ICMP port unreachable
	// askUDP sends again when no answer comes: a datagram or two go to
	// the old target and are refused, the next must reach B.
	if got := askUDP(c); got != "B" {
		t.Fatalf("session on the removed target answered by %q after it refused, want B", got)
	}
}

// TestUDPTargetConnectFailsOver: a target whose address connect(2)
// refuses outright (no route to it, as an IPv6 target on a host without
// IPv6 gives ENETUNREACH; here a link-local address without a zone,
// EINVAL) is down for every client: it is marked down, as a stream's
// failed dial marks it, and the client's datagram goes to the next
// target. The datagram was dropped, and every client the balancer gave
// that target lost all its datagrams.
func TestUDPTargetConnectFailsOver(t *testing.T) {
	leakCheck(t)
	if c, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback}); err != nil {
		t.Skipf("no IPv6: %v", err)
	} else {
		c.Close()
	}
	b := udpTagServer(t, "B")
	s := startRelay(t, Config{Routes: []Route{{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"},
		Targets: []Target{{Addr: Addr{"udp", "[fe80::1]:53"}, Weight: 1}, {Addr: Addr{"udp", b.LocalAddr().String()}, Weight: 1}}}}})
	ra := s.Addrs("u")[0].(*net.UDPAddr)
	const clients = 4
	for i := range clients {
		c := dialUDP(t, ra)
		if _, err := c.Write([]byte("first")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(buf); err != nil || string(buf[:n]) != "B" {
			t.Fatalf("client %d: first datagram answered %q, %v; want B", i, buf[:n], err)
		}
	}
	st := s.Stats().Routes[0]
	if st.DropsWriteError != 0 || st.SessionsTotal != clients {
		t.Errorf("Stats: %d dropped, %d sessions; want 0, %d", st.DropsWriteError, st.SessionsTotal, clients)
	}
	if tg := st.Targets[0]; tg.Up || tg.DialErrors == 0 {
		t.Errorf("target %s, which connect refuses: %+v; want it down, the failure counted", tg.Addr, tg)
	}
}
