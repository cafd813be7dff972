package relay

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestReloadLosesNothing: 20 reloads that change a listen address's
// sockets and routes (workers 1 <-> 2, a second route chosen by SNI, a
// route renamed, its target changed) while three goroutines open short
// connections to it without pause: none fails.
func TestReloadLosesNothing(t *testing.T) { forEachEngine(t, testReloadLosesNothing) }

func testReloadLosesNothing(t *testing.T) {
	leakCheck(t)
	b1 := startBackend(t, "tcp4", echo)
	b2 := startBackend(t, "tcp4", echo)
	listen := freePort(t)
	l := Addr{Network: "tcp", Address: listen}
	configs := []func(workers int) Config{
		func(w int) Config {
			return Config{Routes: []Route{{Name: "r", Listen: l, Target: b1.addr, Workers: w}}}
		},
		func(w int) Config {
			return Config{Routes: []Route{
				{Name: "r", Listen: l, Target: b1.addr, Workers: w},
				{Name: "tls", Listen: l, Target: b2.addr, Workers: w, SNI: []string{"a.example"}},
			}}
		},
		func(w int) Config {
			return Config{Routes: []Route{{Name: "r2", Listen: l, Target: b2.addr, Workers: w}}}
		},
		func(w int) Config {
			return Config{Routes: []Route{{Name: "r2", Listen: l, Target: b1.addr, Workers: w, DialTimeout: time.Second}}}
		},
	}
	s := startRelay(t, configs[0](1))

	var stop atomic.Bool
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := []byte(fmt.Sprintf("ping %d", g))
			buf := make([]byte, len(msg))
			for i := 0; !stop.Load() && i < 200_000; i++ {
				err := func() error {
					c, err := net.DialTimeout("tcp", listen, 5*time.Second)
					if err != nil {
						return err
					}
					defer c.Close()
					c.SetDeadline(time.Now().Add(10 * time.Second))
					if _, err := c.Write(msg); err != nil {
						return err
					}
					if _, err := io.ReadFull(c, buf); err != nil {
						return err
					}
					if string(buf) != string(msg) {
						return fmt.Errorf("echo %q", buf)
					}
					return nil
				}()
				if err != nil {
					failed.Add(1)
					select {
					case errs <- err:
					default:
					}
					continue
				}
				ok.Add(1)
			}
		}()
	}
	for i := range 20 {
		// Let some connections through under each configuration.
		for n := ok.Load() + 100; ok.Load() < n && failed.Load() == 0; {
			time.Sleep(time.Millisecond)
		}
		cfg := configs[(i+1)%len(configs)](1 + (i+1)%2)
		if err := s.Update(withEngine(t, cfg)); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
	}
	for n := ok.Load() + 100; ok.Load() < n && failed.Load() == 0; {
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d connections failed over 20 reloads; first: %v", n, n+ok.Load(), <-errs)
	}
	t.Logf("%d connections over 20 reloads, none failed", ok.Load())
}

// TestReloadAllOrNothing: a reload with one route that cannot bind
// changes nothing: the routes it would change, remove or add stay as they
// were, and serve.
func TestReloadAllOrNothing(t *testing.T) { forEachEngine(t, testReloadAllOrNothing) }

func testReloadAllOrNothing(t *testing.T) {
	leakCheck(t)
	be := startBackend(t, "tcp4", echo)
	ube := startUDPEcho(t)
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	pa, pc := freePort(t), freePort(t)
	running := Config{Routes: []Route{
		{Name: "a", Listen: Addr{"tcp", pa}, Target: be.addr},
		{Name: "c", Listen: Addr{"tcp", pc}, Target: be.addr},
		{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"}, Target: ube},
	}}
	s := startRelay(t, running)
	uAddr := s.Addrs("u")[0].String()
	next := Config{Routes: []Route{
		{Name: "a", Listen: Addr{"tcp", pa}, Target: be.addr, Workers: 2, DialTimeout: time.Second},
		{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"}, Target: ube, Workers: 2},
		{Name: "new", Listen: Addr{"tcp", freePort(t)}, Target: be.addr},
		{Name: "bad", Listen: Addr{"tcp", busy.Addr().String()}, Target: be.addr},
	}}
	err = s.Update(withEngine(t, next))
	if err == nil || !strings.Contains(err.Error(), `route "bad"`) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Update: %v, want route bad's bind error", err)
	}
	var names []string
	for _, r := range s.Stats().Routes {
		names = append(names, r.Name)
	}
	if strings.Join(names, ",") != "a,c,u" {
		t.Fatalf("routes after a refused reload: %v", names)
	}
	if r := s.routes["a"].cfg.Load(); r.Workers != 1 || r.DialTimeout != DefaultDialTimeout {
		t.Errorf("route a took the refused settings: %+v", r)
	}
	if n := len(s.Addrs("a")); n != 1 {
		t.Errorf("route a has %d sockets", n)
	}
	for _, name := range []string{"a", "c"} {
		c := dialRoute(t, s, name)
		if err := roundTrip(c, 1000, 1); err != nil {
			t.Errorf("route %s: %v", name, err)
		}
		c.Close()
	}
	if got := s.Addrs("u")[0].String(); got != uAddr {
		t.Errorf("UDP route moved from %s to %s", uAddr, got)
	}
	uc, err := net.Dial("udp", uAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	uc.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 16)
	for {
		uc.Write([]byte("hi"))
		uc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := uc.Read(buf)
		if err == nil && string(buf[:n]) == "hi" {
			break
		}
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			t.Fatalf("UDP route after a refused reload: %v", err)
		}
	}
	// The same reload without the bad route applies.
	next.Routes = next.Routes[:3]
	if err := s.Update(withEngine(t, next)); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Addrs("a")); n != 2 {
		t.Errorf("route a has %d sockets after the reload, want 2", n)
	}
}

// startUDPEcho is a UDP echo server; it returns its address.
func startUDPEcho(t *testing.T) Addr {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	serveUDP(t, c, func(in []byte) []byte { return in })
	return Addr{"udp", c.LocalAddr().String()}
}

// TestReloadMoveWildcardLosesNothing: a route that moves between a
// specific address and the wildcard of one port, back and forth, while
// clients keep connecting to the specific address. The kernel gives new
// clients to the specific socket while it listens, so clients keep
// queueing on it until it closes: those queued are relayed, not reset.
// Handshakes still in flight when it closes are reset by the kernel (the
// wildcard socket is not in its SO_REUSEPORT group, where
// tcp_migrate_req could move them), a few over the run, and more when the
// machine is loaded (the race detector, other packages' tests); the
// queued clients reset when the event loops were told to stop watching
// the socket between taking its queue and closing it were more than
// twice the tolerance over the run.
func TestReloadMoveWildcardLosesNothing(t *testing.T) {
	forEachEngine(t, testReloadMoveWildcardLosesNothing)
}

func testReloadMoveWildcardLosesNothing(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", echo)
	listen := freePort(t)
	_, port, _ := net.SplitHostPort(listen)
	cfg := func(host string) Config {
		return Config{Routes: []Route{{Name: "r", Listen: Addr{"tcp", net.JoinHostPort(host, port)}, Target: b.addr}}}
	}
	s := startRelay(t, cfg("127.0.0.1"))

	var stop atomic.Bool
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := []byte("ping")
			buf := make([]byte, len(msg))
			for i := 0; !stop.Load() && i < 100_000; i++ {
				err := func() error {
					c, err := net.DialTimeout("tcp", listen, 5*time.Second)
					if err != nil {
						return err
					}
					defer c.Close()
					c.SetDeadline(time.Now().Add(10 * time.Second))
					if _, err := c.Write(msg); err != nil {
						return err
					}
					_, err = io.ReadFull(c, buf)
					return err
				}()
				if err != nil {
					failed.Add(1)
					select {
					case errs <- err:
					default:
					}
					continue
				}
				ok.Add(1)
			}
		}()
	}
	const moves, tolerated = 20, 40
	for i := range moves {
		for n := ok.Load() + 200; ok.Load() < n && failed.Load() <= tolerated; {
			time.Sleep(time.Millisecond)
		}
		host := "0.0.0.0"
		if i%2 == 1 {
			host = "127.0.0.1"
		}
		if err := s.Update(withEngine(t, cfg(host))); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
	}
	for n := ok.Load() + 200; ok.Load() < n && failed.Load() <= tolerated; {
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if n := failed.Load(); n > tolerated {
		t.Fatalf("%d of %d connections failed over %d moves; first: %v", n, n+ok.Load(), moves, <-errs)
	}
	t.Logf("%d connections over %d moves, %d failed", ok.Load(), moves, failed.Load())
}

// TestReloadHandsOverAtLimit: clients waiting in the backlog of a route
// at its connection limit, when a reload moves the route (the wildcard
// of its port, so its old socket closes), are handed over and wait for a
// slot as they did before, not closed as over the limit; for the
// route's limit and the server's.
func TestReloadHandsOverAtLimit(t *testing.T) { forEachEngine(t, testReloadHandsOverAtLimit) }

func testReloadHandsOverAtLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"route", func(c *Config) { c.Routes[0].MaxConns = 2 }},
		{"global", func(c *Config) { c.MaxConns = 2 }},
		{"global, routes chosen by hello", func(c *Config) {
			c.MaxConns = 2
			tls := c.Routes[0]
			tls.Name, tls.SNI = "tls", []string{"a.example"}
			c.Routes = append(c.Routes, tls)
		}},
		{"route chosen by hello", func(c *Config) {
			c.Routes[0].MaxConns = 2
			tls := c.Routes[0]
			tls.Name, tls.SNI = "tls", []string{"a.example"}
			c.Routes = append(c.Routes, tls)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakCheck(t)
			b := startBackend(t, "tcp4", echo)
			listen := freePort(t)
			_, port, _ := net.SplitHostPort(listen)
			cfg := func(host string) Config {
				c := Config{Routes: []Route{{Name: "r", Listen: Addr{"tcp", net.JoinHostPort(host, port)}, Target: b.addr}}}
				tc.mod(&c)
				return c
			}
			s := startRelay(t, cfg("127.0.0.1"))
			var held []net.Conn
			for range 2 {
				c := dialRoute(t, s, "r")
				if err := ping(c); err != nil {
					t.Fatal(err)
				}
				held = append(held, c)
			}
			var waiting []net.Conn
			for range 5 {
				c, err := net.DialTimeout("tcp", listen, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if _, err := io.WriteString(c, "ping"); err != nil {
					t.Fatal(err)
				}
				waiting = append(waiting, c)
			}
			if err := s.Update(withEngine(t, cfg("0.0.0.0"))); err != nil {
				t.Fatal(err)
			}
			for _, c := range held {
				c.Close()
			}
			// Two at a time are let in: each closes once served.
			var wg sync.WaitGroup
			for i, c := range waiting {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer c.Close()
					c.SetDeadline(time.Now().Add(10 * time.Second))
					var buf [4]byte
					if _, err := io.ReadFull(c, buf[:]); err != nil {
						t.Errorf("client %d waiting at the limit during the reload: %v", i, err)
					}
				}()
			}
			wg.Wait()
		})
	}
}
