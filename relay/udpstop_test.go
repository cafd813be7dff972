package relay

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// udpCounter is a target that counts the datagrams it receives.
func udpCounter(t *testing.T) (*net.UDPConn, *atomic.Int64) {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
			n.Add(1)
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return c, &n
}

// TestUDPStopRelaysQueued holds a UDP route's reader while a client's
// datagrams queue up on the listening socket, then stops the route (a
// shutdown, or a reload that binds the address anew): every queued
// datagram reaches the target, none is dropped with the socket.
func TestUDPStopRelaysQueued(t *testing.T) {
	for _, how := range []string{"shutdown", "reload-rebind"} {
		t.Run(how, func(t *testing.T) {
			leakCheck(t)
			target, got := udpCounter(t)
			cfg := udpRoute0("127.0.0.1:0", target.LocalAddr(), nil)
			s := startRelay(t, cfg)
			ra := s.Addrs("u")[0].(*net.UDPAddr)
			moved := freeUDPPort(t) // where the reload rebinds the route
			c, err := net.DialUDP("udp4", nil, ra)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s.mu.Lock()
			u := s.routes["u"].udp
			s.mu.Unlock()

			// The reader takes the first datagram and waits for u.mu in
			// session: the rest queue on the socket.
			u.mu.Lock()
			locked := true
			defer func() {
				if locked {
					u.mu.Unlock()
				}
			}()
			if _, err := c.Write([]byte("first")); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return blockedOnLock("(*udpRoute).session") })
			const queued = 100
			for i := range queued {
				if _, err := c.Write(fmt.Appendf(nil, "queued %d", i)); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch how {
				case "shutdown":
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					if err := s.Shutdown(ctx); err != nil {
						t.Error(err)
					}
				case "reload-rebind":
					next := udpRoute0(moved.String(), target.LocalAddr(), nil)
					if err := s.Update(next); err != nil {
						t.Error(err)
					}
				}
			}()
			waitFor(t, u.stopping.Load) // the stop has begun; the datagrams wait
			locked = false
			u.mu.Unlock()
			wg.Wait()
			waitFor(t, func() bool { return got.Load() >= queued+1 })
			if n := got.Load(); n != queued+1 {
				t.Fatalf("target received %d datagrams, want %d", n, queued+1)
			}
			if how == "reload-rebind" {
				if as := s.Addrs("u"); len(as) != 1 || as[0].String() != moved.String() {
					t.Fatalf("after the reload the route listens on %v, want %v", as, moved)
				}
			}
		})
	}
}

// TestUDPTargetFollowsDNS: a target given by host name is looked up again
// for new sessions, so a DNS change reaches them, while a session under
// way keeps the address it started with.
func TestUDPTargetFollowsDNS(t *testing.T) {
	leakCheck(t)
	a := udpTagServer(t, "A")
	port := a.LocalAddr().(*net.UDPAddr).Port
	bc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: port})
	if err != nil {
		t.Skipf("127.0.0.2:%d (the loopback network's second address, on the same port) is not free here: %v", port, err)
	}
	bc.Close()
	b := udpTagServerAt(t, "B", fmt.Sprintf("127.0.0.2:%d", port))

	var mu sync.Mutex
	answer := netip.MustParseAddr("127.0.0.1")
	oldLookup, oldEvery := lookupNetIP, resolveEvery
	lookupNetIP = func(ctx context.Context, network, host string) ([]netip.Addr, error) {
		if host != "backend.test" {
			return oldLookup(ctx, network, host)
		}
		mu.Lock()
		defer mu.Unlock()
		return []netip.Addr{answer}, nil
	}
	resolveEvery = 0 // every new session looks the name up again
	t.Cleanup(func() { lookupNetIP, resolveEvery = oldLookup, oldEvery })

	cfg := Config{Routes: []Route{{Name: "u", Listen: Addr{Network: "udp", Address: "127.0.0.1:0"},
		Target: Addr{Network: "udp", Address: fmt.Sprintf("backend.test:%d", port)}}}}
	s := startRelay(t, cfg)
	ra := s.Addrs("u")[0].(*net.UDPAddr)
	dial := func() *net.UDPConn { return dialUDP(t, ra) }
	old := dial()
	if got := askUDP(old); got != "A" {
		t.Fatalf("before the DNS change: answered by %q, want A", got)
	}
	mu.Lock()
	answer = b.LocalAddr().(*net.UDPAddr).AddrPort().Addr()
	mu.Unlock()
	s.mu.Lock()
	u := s.routes["u"].udp
	s.mu.Unlock()
	// A new session starts a lookup; the one after it finds the answer.
	// A lookup the first session started may still be under way and
	// bring the old answer, so the wait asks again as a new session
	// would.
	askUDP(dial())
	waitFor(t, func() bool {
		u.targetFor(u.rt.targets().bs[0], time.Now().UnixNano())
		return (*u.to.Load())[cfg.Routes[0].Target].addr.Addr() == answer
	})
	if got := askUDP(dial()); got != "B" {
		t.Errorf("new session after the DNS change answered by %q, want B", got)
	}
	if got := askUDP(old); got != "A" {
		t.Errorf("session under way answered by %q after the DNS change, want A", got)
	}
}

// udpTagServerAt is udpTagServer bound to addr.
func udpTagServerAt(t *testing.T, tag, addr string) *net.UDPConn {
	t.Helper()
	la, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenUDP("udp4", la)
	if err != nil {
		t.Fatal(err)
	}
	serveUDP(t, c, func([]byte) []byte { return []byte(tag) })
	return c
}
