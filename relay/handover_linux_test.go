package relay

import (
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSteer: a socket opened alone joins a SO_REUSEPORT group once the
// option is set on it, and steer sends every new connection to the first
// n sockets of the group.
func TestSteer(t *testing.T) {
	r := &Route{Listen: Addr{"tcp", "127.0.0.1:0"}, Workers: 1}
	first, err := listenStream(r)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(first)
	if err := reusePort(listenerControl(first[0])); err != nil {
		t.Fatal(err)
	}
	more, err := listenStreamAt(r, first[0].Addr().String(), 2, true)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(more)
	lns := append(first, more...)
	if err := steer(listenerControl(lns[0]), 0, 1); errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPERM) {
		t.Skipf("SO_ATTACH_REUSEPORT_CBPF refused by this kernel or its sandbox: %v", err)
	} else if err != nil {
		t.Fatalf("steer: %v", err)
	}
	const n = 50
	for range n {
		c, err := net.Dial("tcp", lns[0].Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	count := func(ln net.Listener) int {
		k := 0
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
		for {
			c, err := ln.Accept()
			if err != nil {
				return k
			}
			c.Close()
			k++
		}
	}
	if got := count(lns[0]); got != n {
		t.Errorf("first socket accepted %d of %d", got, n)
	}
	for i, ln := range more {
		if got := count(ln); got != 0 {
			t.Errorf("socket %d accepted %d after steering", i+1, got)
		}
	}
}

// TestRetire: sockets taken out of a front close after their grace,
// handing over the connections they queued, and a front serves on with
// the sockets it kept; Shutdown leaves nothing behind.
func TestRetire(t *testing.T) { forEachEngine(t, testRetire) }

func testRetire(t *testing.T) {
	leakCheck(t)
	defer func(g time.Duration) { retireGrace = g }(retireGrace)
	retireGrace = 10 * time.Millisecond
	be := startBackend(t, "tcp4", echo)
	listen := freePort(t)
	s := startRelay(t, Config{Routes: []Route{{Name: "r", Listen: Addr{"tcp", listen}, Target: be.addr, Workers: 3}}})
	s.mu.Lock()
	f := s.fronts[frontKey(&s.cfg.Routes[0])]
	gone := f.lns[1:]
	// Connections queued on a retiring socket (its accept loop is not
	// fast enough to take them all) are handed over when it closes.
	var clients []net.Conn
	for range 20 {
		c, err := net.Dial("tcp", listen)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	// As a reload does: steer new clients to the socket kept, where the
	// kernel can, then retire the others. Where it cannot (and does not
	// migrate handshakes, tcp_migrate_req), a reload keeps them open;
	// this test retires them anyway, and dials again only once they
	// have closed.
	steer(listenerControl(f.lns[0]), 0, 1)
	f.retire(gone)
	f.lns = f.lns[:1]
	s.mu.Unlock()
	for i, c := range clients {
		if err := roundTrip(c, 100, uint64(i)); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		c.Close()
	}
	// Wait for the retired sockets to close, then the one kept serves.
	// An error from Accept does not tell: it comes as soon as Close has
	// begun, before close(2) takes the socket out of its group, and a
	// client that lands on it meanwhile is reset (and the event engine's
	// listeners do not accept at all).
	deadline := time.Now().Add(10 * time.Second) // a hang guard
	for {
		s.mu.Lock()
		n := len(f.retiring)
		s.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("retired sockets still open")
		}
		time.Sleep(time.Millisecond)
	}
	for i := range 20 {
		c, err := net.Dial("tcp", listen)
		if err != nil {
			t.Fatal(err)
		}
		if err := roundTrip(c, 100, uint64(i)); err != nil {
			t.Fatalf("after: %v", err)
		}
		c.Close()
	}
	if n := len(s.Addrs("r")); n != 1 {
		t.Errorf("%d sockets left", n)
	}
}
