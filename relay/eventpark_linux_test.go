package relay

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestParkedFirst: a client waiting for a slot in an event loop (here
// one a reload handed over while its route was full) gets the slot that
// frees before a client that connected after it: the loops accept no new
// client while one waits, or a parked client, looking again only now and
// then, could lose every freed slot to new ones and wait for seconds.
func TestParkedFirst(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", echo)
	listen := freePort(t)
	_, port, _ := net.SplitHostPort(listen)
	cfg := func(host string) Config {
		return Config{Engine: EngineEvent, Routes: []Route{{Name: "r", Listen: Addr{"tcp", net.JoinHostPort(host, port)}, Target: b.addr, MaxConns: 1}}}
	}
	s := startRelay(t, cfg("127.0.0.1"))
	a := dialRoute(t, s, "r")
	defer a.Close()
	if err := ping(a); err != nil {
		t.Fatal(err)
	}
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", listen, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, "ping"); err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := dial() // waits in the backlog, then is handed over
	defer first.Close()
	if err := s.Update(cfg("0.0.0.0")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { // first waits in a loop for the slot
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.routes["r"].parked.Load() == 1
	})
	later := dial() // waits in the new socket's backlog
	defer later.Close()
	a.Close() // frees the slot
	first.SetDeadline(time.Now().Add(5 * time.Second))
	var buf [4]byte
	if _, err := io.ReadFull(first, buf[:]); err != nil {
		t.Fatalf("the client waiting for a slot lost it to one that came later: %v", err)
	}
	first.Close()
	later.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(later, buf[:]); err != nil {
		t.Fatalf("the later client: %v", err)
	}
}
