package relay

import (
	"net"
	"testing"
	"time"
)

// TestWaitingClientsHoldNoBuffer: clients of a front whose routes the
// ClientHello tells apart, and of a route that takes a PROXY header,
// hold no pooled buffer while they have sent nothing: the loop takes one
// when bytes arrive. Otherwise every client that connects and stays
// silent holds a hello buffer (64 KiB in the pool's size classes) until
// the peek timeout.
func TestWaitingClientsHoldNoBuffer(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", echo)
	listen := freePort(t)
	s := startRelay(t, Config{Engine: EngineEvent, Routes: []Route{
		{Name: "a", Listen: Addr{Network: "tcp", Address: listen}, Target: b.addr, SNI: []string{"a.example"}},
		{Name: "p", Listen: Addr{Network: "tcp", Address: "127.0.0.1:0"}, Target: b.addr, AcceptProxy: true},
	}})
	const n = 10
	var hello []net.Conn
	for range n {
		c, err := net.DialTimeout("tcp", listen, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		hello = append(hello, c)
		defer dialRoute(t, s, "p").Close()
	}
	waitFor(t, func() bool { return s.active.Load() == 2*n })
	// Each call runs at the end of a turn of every loop: after the
	// second, the loops have handled the events their clients'
	// registrations raised.
	s.eng.holding()
	if bufs, _, _, _ := s.eng.holding(); bufs != 0 {
		t.Errorf("%d clients that sent nothing hold %d buffers", 2*n, bufs)
	}
	// The first bytes of a hello need a buffer to wait in.
	for _, c := range hello {
		if _, err := c.Write([]byte{22, 3, 1, 0, 200, 1, 0, 0}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool {
		bufs, _, _, _ := s.eng.holding()
		return bufs == n
	})
}
