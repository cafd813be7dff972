package relay

import (
	"crypto/tls"
	"net"
	"testing"
	"time"
)

// TestPeekCountsAgainstLimit: clients still sending their ClientHello to
// a front whose routes the hello tells apart hold slots under the
// server's limit, so that clients stalling there pause accepting instead
// of getting in without bound; they are closed at the peek timeout, and
// a real client is served once slots free. No slot is left taken.
func TestPeekCountsAgainstLimit(t *testing.T) { forEachEngine(t, testPeekCountsAgainstLimit) }

func testPeekCountsAgainstLimit(t *testing.T) {
	leakCheck(t)
	// The event engine's loops may each let one client in over the
	// limit when they race for its last slot: k leaves room for that.
	const n, k = 2, 3
	a := startTLSBackend(t, false, "a.example")
	listen := freePort(t)
	s := startRelay(t, Config{MaxConns: n, Routes: []Route{{
		Name: "a", Listen: Addr{Network: "tcp", Address: listen}, Target: a.addr,
		SNI: []string{"a.example"}, PeekTimeout: 300 * time.Millisecond,
	}}})
	waitActive := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second) // a hang guard
		for s.active.Load() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d slots taken, want %d", s.active.Load(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// n+k clients send the first bytes of a hello and stall.
	var stalled []net.Conn
	for range n + k {
		c, err := net.DialTimeout("tcp", listen, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte{22, 3, 1, 0, 200, 1, 0, 0}); err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, c)
	}
	// The first n hold the server's slots while they stall, so a real
	// client waits in the listen backlog behind the others (the kernel
	// hands them out in order), and gets in only after stalled ones were
	// closed at the peek timeout. (Nothing here waits to see the slots
	// taken: the stalled clients give them up after the peek timeout,
	// which a slow machine could let pass unseen.)
	tlsRoundTrip(t, listen, nil, &tls.Config{ServerName: "a.example", RootCAs: a.pool()}, a, 1000)
	if f := s.Stats().Fronts[0]; f.HelloTimeouts == 0 {
		t.Errorf("the real client got in while %d stalled clients held every slot: %+v", n, f)
	}
	for i, c := range stalled {
		if !waitClosed(c, 10*time.Second) {
			t.Fatalf("stalled client %d still open", i)
		}
	}
	waitActive(0)
	if f := s.Stats().Fronts[0]; f.HelloTimeouts != n+k {
		t.Errorf("%d hello timeouts, want %d", f.HelloTimeouts, n+k)
	}
}
