package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// TestUDPUnresolvedTarget: a UDP target whose host name does not resolve
// is down, and its route serves with its other targets; a route none of
// whose targets resolves still starts, and drops its datagrams.
func TestUDPUnresolvedTarget(t *testing.T) {
	leakCheck(t)
	a := udpTagServer(t, "A")
	bad := Addr{Network: "udp", Address: "nonexistent.invalid:53"}
	cfg := Config{Routes: []Route{
		{Name: "u", Listen: Addr{Network: "udp", Address: "127.0.0.1:0"},
			Targets: []Target{{Addr: bad, Weight: 1}, {Addr: Addr{Network: "udp", Address: a.LocalAddr().String()}, Weight: 1}}},
		{Name: "none", Listen: Addr{Network: "udp", Address: "127.0.0.1:0"}, Target: bad},
	}}
	s := startRelay(t, cfg)
	ra := s.Addrs("u")[0].(*net.UDPAddr)
	for i := range 6 { // round-robin would give the bad target every other one
		c, err := net.DialUDP("udp4", nil, ra)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := askUDP(c); got != "A" {
			t.Fatalf("session %d answered by %q, want A", i, got)
		}
	}
	// Stats lists the routes by name: none, then u.
	st := s.Stats()
	if ts := st.Routes[1].Targets; ts[0].Up || !ts[1].Up {
		t.Errorf("targets %+v: want the unresolved one down, the other up", ts)
	}
	if ts := st.Routes[0].Targets; ts[0].Up {
		t.Errorf("route none's target %+v: want it down", ts[0])
	}
	// The route with no target that resolves listens, and drops.
	c, err := net.DialUDP("udp4", nil, s.Addrs("none")[0].(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("who?")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return s.Stats().Routes[0].DropsWriteError == 1 })
	if n := s.Stats().Routes[0].SessionsTotal; n != 0 {
		t.Errorf("%d sessions on a route without an address", n)
	}
}

// TestUDPTargetResolvesLater: a target whose name did not resolve at
// start is looked up again in the background, and serves once it
// resolves.
func TestUDPTargetResolvesLater(t *testing.T) {
	leakCheck(t)
	a := udpTagServer(t, "A")
	port := a.LocalAddr().(*net.UDPAddr).Port
	var resolves atomic.Bool
	oldLookup := lookupNetIP
	lookupNetIP = func(ctx context.Context, network, host string) ([]netip.Addr, error) {
		if host != "late.test" {
			return oldLookup(ctx, network, host)
		}
		if !resolves.Load() {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	t.Cleanup(func() { lookupNetIP = oldLookup })
	s := startRelay(t, Config{Routes: []Route{{Name: "u", Listen: Addr{Network: "udp", Address: "127.0.0.1:0"},
		Target: Addr{Network: "udp", Address: fmt.Sprintf("late.test:%d", port)}}}})
	if s.Stats().Routes[0].Targets[0].Up {
		t.Fatal("target up before its name resolves")
	}
	c, err := net.DialUDP("udp4", nil, s.Addrs("u")[0].(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resolves.Store(true)
	// The next lookup comes once the target's down mark runs out (1 s);
	// datagrams before it are dropped.
	buf := make([]byte, 64)
	waitFor(t, func() bool {
		c.Write([]byte("who?"))
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := c.Read(buf)
		if err != nil && !errors.Is(err, net.ErrClosed) {
			return false
		}
		return string(buf[:n]) == "A"
	})
	if !s.Stats().Routes[0].Targets[0].Up {
		t.Error("target still down after its name resolved")
	}
}
