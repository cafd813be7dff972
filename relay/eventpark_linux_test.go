package relay

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/tlshello/hellotest"
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

// TestParkedClientsSleep: clients whose hello chose a route at its limit
// wait in their loops for a slot without a timer each waking its loop
// every few milliseconds (many such clients kept the loops busy doing
// nothing); each is served once a relay of the route ends.
func TestParkedClientsSleep(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", echo)
	listen := freePort(t)
	l := Addr{Network: "tcp", Address: listen}
	s := startRelay(t, Config{Engine: EngineEvent, Routes: []Route{
		{Name: "a", Listen: l, Target: b.addr, SNI: []string{"a.example"}, MaxConns: 1},
		{Name: "default", Listen: l, Target: b.addr},
	}})
	hello := hellotest.Build("a.example", nil)
	send := func() net.Conn {
		c, err := net.DialTimeout("tcp", listen, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(hello); err != nil {
			t.Fatal(err)
		}
		return c
	}
	echoed := func(c net.Conn) error {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.ReadFull(c, make([]byte, len(hello)))
		return err
	}
	first := send()
	defer first.Close()
	if err := echoed(first); err != nil {
		t.Fatal(err)
	}
	const n = 20
	var parked []net.Conn
	for range n {
		c := send()
		defer c.Close()
		parked = append(parked, c)
	}
	waitFor(t, func() bool { return s.routes["a"].parked.Load() == n })
	turns := func() (k uint64) {
		for _, lp := range s.eng.(*eventEngine).started() {
			lp.call(func() { k += lp.turns })
		}
		return k
	}
	before := turns()
	time.Sleep(300 * time.Millisecond)
	if k := turns() - before; k > 10 {
		t.Errorf("loops with %d parked clients took %d turns in 300 ms with nothing to do", n, k)
	}
	// One at a time, in whichever loop, each gets the slot the one
	// before gave back.
	first.Close()
	errs := make(chan error, n)
	for _, c := range parked {
		go func() {
			errs <- echoed(c)
			c.Close()
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("parked client: %v", err)
		}
	}
}
