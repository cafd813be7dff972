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

// TestPausedLoopSleeps: while accepting is paused at a limit and nothing
// moves, the loops sleep instead of waking every few milliseconds to look
// for a slot; the client waiting in the backlog is served once a relay
// ends, whichever loop it ends on.
func TestPausedLoopSleeps(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", echo)
	cfg := route0("127.0.0.1:0", b.addr, nil)
	cfg.Engine, cfg.MaxConns = EngineEvent, 1
	s := startRelay(t, cfg)
	a := dialRoute(t, s, "r")
	defer a.Close()
	if err := ping(a); err != nil {
		t.Fatal(err)
	}
	c := dialRoute(t, s, "r") // waits in the backlog
	defer c.Close()
	waitFor(t, func() bool { return s.Stats().Routes[0].AcceptPaused })
	turns := func() (n uint64) {
		for _, lp := range s.eng.(*eventEngine).started() {
			lp.call(func() { n += lp.turns })
		}
		return n
	}
	before := turns()
	time.Sleep(300 * time.Millisecond)
	// Each call above and below takes a turn of each loop.
	if n := turns() - before; n > 10 {
		t.Errorf("paused loops took %d turns in 300 ms with nothing to do", n)
	}
	a.Close()
	if err := ping(c); err != nil {
		t.Fatalf("waiting client: %v", err)
	}
}
