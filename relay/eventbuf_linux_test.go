package relay

import (
	"bytes"
	"io"
	"net"
	"syscall"
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
	testEng(s).holding()
	if bufs, _, _, _ := testEng(s).holding(); bufs != 0 {
		t.Errorf("%d clients that sent nothing hold %d buffers", 2*n, bufs)
	}
	// The first bytes of a hello need a buffer to wait in.
	for _, c := range hello {
		if _, err := c.Write([]byte{22, 3, 1, 0, 200, 1, 0, 0}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool {
		bufs, _, _, _ := testEng(s).holding()
		return bufs == n
	})
}

// TestPipesWithinDescriptorBudget: relays whose clients do not read hold
// their bytes in a splice pipe, two descriptors each, on top of the two
// sockets. The descriptor budget keeps room for a pipe per two pairs
// (fdsPerPair), so past that room the loops copy through a buffer
// instead of opening more pipes: otherwise such clients run the process
// out of descriptors, and the metrics server, health checks and reloads
// fail with EMFILE. The bytes all arrive either way.
func TestPipesWithinDescriptorBudget(t *testing.T) {
	leakCheck(t)
	const size = 16 << 20
	bulk := make([]byte, size)
	for i := range bulk {
		bulk[i] = byte(i * 7)
	}
	b := startBackend(t, "tcp4", func(c net.Conn) { c.Write(bulk) })
	cfg := route0("127.0.0.1:0", b.addr, nil)
	cfg.Engine = EngineEvent
	s := startRelay(t, cfg)
	const n = 8
	s.fdBudget.Store(n) // as a descriptor limit of fdReserve+1+3n gives
	room := int64(n * (fdsPerPair - 2) / 2)
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return nil
	}}
	var cs []net.Conn
	for range n {
		c, err := d.Dial("tcp", s.Addrs("r")[0].String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	// Every relay stalls on its client with bytes in a pipe or a buffer.
	waitFor(t, func() bool {
		bufs, pipes, _, _ := testEng(s).holding()
		return bufs+pipes == n
	})
	if _, pipes, _, _ := testEng(s).holding(); pipes > room {
		t.Errorf("%d relays hold %d pipes, past the budget's room for %d", n, pipes, room)
	}
	for i, c := range cs {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		got, err := io.ReadAll(c)
		if err != nil || !bytes.Equal(got, bulk) {
			t.Fatalf("client %d: %d bytes of %d, %v", i, len(got), size, err)
		}
	}
}
