package relay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/proxyproto"
	"github.com/zeroio/zeroio/splice"
)

func TestRelayIntegrity(t *testing.T) { forEachEngine(t, testRelayIntegrity) }

func testRelayIntegrity(t *testing.T) {
	for _, tc := range []struct{ name, listen, target string }{
		{"tcp4-to-tcp4", "127.0.0.1:0", "tcp4"},
		{"tcp6-to-tcp6", "[::1]:0", "tcp6"},
		{"tcp-to-unix", "127.0.0.1:0", "unix"},
		{"unix-to-tcp", "unix", "tcp4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakCheck(t)
			b := startBackend(t, tc.target, echo)
			listen := tc.listen
			if listen == "unix" {
				listen = filepath.Join(shortTempDir(t), "l.sock")
			}
			s := startRelay(t, route0(listen, b.addr, nil))
			const streams = 40
			var wg sync.WaitGroup
			errs := make(chan error, streams)
			for i := range streams {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := dialRoute(t, s, "r")
					defer c.Close()
					size := 1 + (i*7919)%(512<<10)
					if i%8 == 0 {
						size = 4 << 20
					}
					if err := roundTrip(c, size, uint64(i)); err != nil {
						errs <- fmt.Errorf("stream %d (%d bytes): %w", i, size, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			st := s.Stats().Routes[0]
			if st.BytesUp != st.BytesDown || st.BytesUp == 0 {
				t.Errorf("bytes up %d, down %d", st.BytesUp, st.BytesDown)
			}
		})
	}
}

// TestHalfClose checks that EOF in one direction is passed on as a
// shutdown of writing while the other direction keeps flowing.
func TestHalfClose(t *testing.T) { forEachEngine(t, testHalfClose) }

func testHalfClose(t *testing.T) {
	t.Run("client-closes-first", func(t *testing.T) {
		leakCheck(t)
		// The target reads to EOF, then answers.
		b := startBackend(t, "tcp4", func(c net.Conn) {
			got, _ := io.ReadAll(c)
			fmt.Fprintf(c, "got %q after EOF", got)
		})
		s := startRelay(t, route0("127.0.0.1:0", b.addr, nil))
		c := dialRoute(t, s, "r")
		defer c.Close()
		io.WriteString(c, "request")
		closeWrite(c)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := io.ReadAll(c)
		if err != nil || string(resp) != `got "request" after EOF` {
			t.Fatalf("response %q, %v", resp, err)
		}
	})
	t.Run("target-closes-first", func(t *testing.T) {
		leakCheck(t)
		// The target speaks first and half-closes, then keeps reading.
		late := make(chan string, 1)
		b := startBackend(t, "tcp4", func(c net.Conn) {
			io.WriteString(c, "banner")
			closeWrite(c)
			got, err := io.ReadAll(c)
			late <- fmt.Sprintf("%q %v", got, err)
		})
		s := startRelay(t, route0("127.0.0.1:0", b.addr, nil))
		c := dialRoute(t, s, "r")
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		banner, err := io.ReadAll(c) // EOF arrives while our side is open
		if err != nil || string(banner) != "banner" {
			t.Fatalf("banner %q, %v", banner, err)
		}
		if _, err := io.WriteString(c, "late request"); err != nil {
			t.Fatalf("write after target's half-close: %v", err)
		}
		closeWrite(c)
		if got := <-late; got != `"late request" <nil>` {
			t.Fatalf("target read %s after its half-close", got)
		}
		if !waitClosed(c, 5*time.Second) {
			t.Fatal("relay did not close after both directions ended")
		}
	})
}

func TestIdleTimeout(t *testing.T) { forEachEngine(t, testIdleTimeout) }

func testIdleTimeout(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", echo)
	const idle = 600 * time.Millisecond
	s := startRelay(t, route0("127.0.0.1:0", b.addr, func(r *Route) { r.IdleTimeout = idle }))
	c := dialRoute(t, s, "r")
	defer c.Close()
	// A transfer that lasts several idle periods but never pauses that
	// long stays up.
	buf := make([]byte, 1024)
	deadline := time.Now().Add(4 * idle)
	for time.Now().Before(deadline) {
		if _, err := c.Write(buf); err != nil {
			t.Fatalf("write during active transfer: %v", err)
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("read during active transfer: %v", err)
		}
		time.Sleep(idle / 12)
	}
	// Silence: the relay closes within the idle period (plus slack).
	start := time.Now()
	if !waitClosed(c, 10*idle) {
		t.Fatal("idle connection not closed")
	}
	if e := time.Since(start); e < idle*8/10 {
		t.Errorf("closed after %v, before the idle timeout %v", e, idle)
	}
	waitFor(t, func() bool { return s.Stats().Routes[0].IdleTimeouts == 1 })
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not reached in 5 s")
}

func TestConnectionLimits(t *testing.T) { forEachEngine(t, testConnectionLimits) }

func testConnectionLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"route", func(c *Config) { c.Routes[0].MaxConns = 2 }},
		{"per-client", func(c *Config) { c.Routes[0].MaxConnsPerClient = 2 }},
		{"global", func(c *Config) { c.MaxConns = 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakCheck(t)
			b := startBackend(t, "tcp4", echo)
			cfg := route0("127.0.0.1:0", b.addr, nil)
			tc.mod(&cfg)
			s := startRelay(t, cfg)
			var held []net.Conn
			for range 2 {
				c := dialRoute(t, s, "r")
				defer c.Close()
				if err := ping(c); err != nil {
					t.Fatal(err)
				}
				held = append(held, c)
			}
			over := dialRoute(t, s, "r")
			defer over.Close()
			if tc.name != "per-client" {
				// At the route's or the global limit the relay stops
				// accepting: the client waits in the listen backlog and
				// is served once a slot frees.
				waitFor(t, func() bool { return s.Stats().Routes[0].AcceptPaused })
				held[0].Close()
				if err := ping(over); err != nil {
					t.Fatalf("waiting client after a slot freed: %v", err)
				}
				if st := s.Stats().Routes[0]; st.OverLimit != 0 {
					t.Errorf("OverLimit = %d, want 0: nobody dropped", st.OverLimit)
				}
				return
			}
			// Only the per-client limit, which needs the client's
			// address, accepts and closes.
			if !waitClosed(over, 5*time.Second) {
				t.Fatal("connection over the limit was not closed")
			}
			if st := s.Stats().Routes[0]; st.OverLimit != 1 {
				t.Errorf("OverLimit = %d", st.OverLimit)
			}
			held[0].Close()
			waitFor(t, func() bool { return s.Stats().Routes[0].Active == 1 })
			c := dialRoute(t, s, "r")
			defer c.Close()
			if err := ping(c); err != nil {
				t.Fatalf("after a slot freed: %v", err)
			}
		})
	}
}

func ping(c net.Conn) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "ping"); err != nil {
		return err
	}
	var b [4]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || string(b[:]) != "ping" {
		return fmt.Errorf("ping: %q %v", b, err)
	}
	return nil
}

func TestACL(t *testing.T) { forEachEngine(t, testACL) }

func testACL(t *testing.T) {
	b := startBackend(t, "tcp4", echo)
	for _, tc := range []struct {
		name        string
		listen      string
		allow, deny []string
		ok          bool
	}{
		{"open", "127.0.0.1:0", nil, nil, true},
		{"allowed", "127.0.0.1:0", []string{"127.0.0.0/8"}, nil, true},
		{"not-in-allow", "127.0.0.1:0", []string{"10.0.0.0/8"}, nil, false},
		{"denied", "127.0.0.1:0", nil, []string{"127.0.0.1/32"}, false},
		{"deny-wins", "127.0.0.1:0", []string{"0.0.0.0/0"}, []string{"127.0.0.0/8"}, false},
		{"ipv6-allowed", "[::1]:0", []string{"::1/128"}, nil, true},
		{"ipv6-denied", "[::1]:0", []string{"127.0.0.0/8"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startRelay(t, route0(tc.listen, b.addr, func(r *Route) {
				for _, p := range tc.allow {
					r.Allow = append(r.Allow, netip.MustParsePrefix(p))
				}
				for _, p := range tc.deny {
					r.Deny = append(r.Deny, netip.MustParsePrefix(p))
				}
			}))
			c := dialRoute(t, s, "r")
			defer c.Close()
			err := ping(c)
			if tc.ok != (err == nil) {
				t.Fatalf("ping: %v, want ok=%v", err, tc.ok)
			}
			if st := s.Stats().Routes[0]; !tc.ok && st.Denied != 1 {
				t.Errorf("Denied = %d", st.Denied)
			}
		})
	}
}

// proxyTarget reads a PROXY header and reports the source it names.
func proxyTarget(t *testing.T) (*testBackend, chan netip.AddrPort) {
	got := make(chan netip.AddrPort, 10)
	b := startBackend(t, "tcp4", func(c net.Conn) {
		h, err := proxyproto.ReadHeader(c)
		if err != nil {
			got <- netip.AddrPort{}
			return
		}
		got <- h.Source
		echo(c)
	})
	return b, got
}

func TestProxyProtocolSend(t *testing.T) { forEachEngine(t, testProxyProtocolSend) }

func testProxyProtocolSend(t *testing.T) {
	for _, v := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			b, got := proxyTarget(t)
			s := startRelay(t, route0("127.0.0.1:0", b.addr, func(r *Route) { r.SendProxy = v }))
			c := dialRoute(t, s, "r")
			defer c.Close()
			if err := ping(c); err != nil {
				t.Fatal(err)
			}
			if src := <-got; src.String() != c.LocalAddr().String() {
				t.Fatalf("target saw source %v, client is %v", src, c.LocalAddr())
			}
			// The header is the relay's: the counters hold the
			// client's 4 bytes each way, on every engine.
			c.Close()
			waitFor(t, func() bool { return s.Stats().Routes[0].Relayed == 1 })
			st := s.Stats().Routes[0]
			if st.BytesUp != 4 || st.BytesDown != 4 || st.Targets[0].BytesUp != 4 {
				t.Errorf("bytes up %d (target %d), down %d; want 4", st.BytesUp, st.Targets[0].BytesUp, st.BytesDown)
			}
		})
	}
}

// TestProxyHeaderBeforeEarlyBytes: a client that sent more than a
// buffer's worth before the relay dialled its target (it waited in the
// listen backlog): the target gets the PROXY header, then every byte the
// client sent, in order.
func TestProxyHeaderBeforeEarlyBytes(t *testing.T) {
	forEachEngine(t, testProxyHeaderBeforeEarlyBytes)
}

func testProxyHeaderBeforeEarlyBytes(t *testing.T) {
	for _, v := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			b, got := proxyTarget(t)
			cfg := route0("127.0.0.1:0", b.addr, func(r *Route) { r.SendProxy = v })
			cfg.MaxConns = 1
			s := startRelay(t, cfg)
			first := dialRoute(t, s, "r") // holds the only slot
			defer first.Close()
			if err := ping(first); err != nil {
				t.Fatal(err)
			}
			<-got
			c := dialRoute(t, s, "r")
			defer c.Close()
			// The bytes wait in the relay's backlog: the route is paused
			// at its limit, and the client's write has returned.
			waitFor(t, func() bool { return s.Stats().Routes[0].AcceptPaused })
			wc := &wroteConn{TCPConn: c.(*net.TCPConn), wrote: make(chan struct{})}
			errc := make(chan error, 1)
			go func() { errc <- roundTrip(wc, 64<<10, uint64(v)) }()
			select {
			case <-wc.wrote:
			case err := <-errc:
				t.Fatalf("before the slot freed: %v", err)
			}
			first.Close()
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if src := <-got; src.String() != c.LocalAddr().String() {
				t.Fatalf("target saw source %v, client is %v", src, c.LocalAddr())
			}
		})
	}
}

// wroteConn closes wrote when its first Write returns.
type wroteConn struct {
	*net.TCPConn
	wrote chan struct{}
	once  sync.Once
}

func (c *wroteConn) Write(p []byte) (int, error) {
	defer c.once.Do(func() { close(c.wrote) })
	return c.TCPConn.Write(p)
}

func TestProxyProtocolAccept(t *testing.T) { forEachEngine(t, testProxyProtocolAccept) }

func testProxyProtocolAccept(t *testing.T) {
	fake := netip.MustParseAddrPort("203.0.113.5:4242")
	relayDst := netip.MustParseAddrPort("198.51.100.1:443")
	for _, tc := range []struct {
		name   string
		header []byte
		mod    func(*Route)
		ok     bool
	}{
		{"v1", proxyproto.AppendV1(nil, fake, relayDst), nil, true},
		{"v2", proxyproto.AppendV2(nil, proxyproto.Stream, fake, relayDst), nil, true},
		{"garbage", []byte("GET / HTTP/1.0\r\n\r\n"), nil, false},
		{"acl-on-real-client", proxyproto.AppendV1(nil, fake, relayDst), func(r *Route) {
			r.Deny = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
		}, false},
		{"untrusted-peer", proxyproto.AppendV1(nil, fake, relayDst), func(r *Route) {
			r.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		}, false},
		{"trusted-peer", proxyproto.AppendV1(nil, fake, relayDst), func(r *Route) {
			r.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		}, true},
		{"header-timeout", nil, func(r *Route) { r.ProxyHeaderTimeout = 200 * time.Millisecond }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, got := proxyTarget(t)
			s := startRelay(t, route0("127.0.0.1:0", b.addr, func(r *Route) {
				r.AcceptProxy, r.SendProxy = true, 2
				if tc.mod != nil {
					tc.mod(r)
				}
			}))
			c := dialRoute(t, s, "r")
			defer c.Close()
			c.Write(tc.header)
			err := ping(c)
			if tc.ok != (err == nil) {
				t.Fatalf("ping: %v, want ok=%v", err, tc.ok)
			}
			if tc.ok {
				if src := <-got; src != fake {
					t.Fatalf("target saw %v, want %v from the accepted header", src, fake)
				}
			}
		})
	}
}

func TestGracefulShutdown(t *testing.T) { forEachEngine(t, testGracefulShutdown) }

func testGracefulShutdown(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", echo)
	s, err := New(withEngine(t, route0("127.0.0.1:0", b.addr, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	addr := s.Addrs("r")[0].String()
	c := dialRoute(t, s, "r")
	defer c.Close()
	if err := ping(c); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	// New connections are refused once the listener is closed...
	waitFor(t, func() bool {
		c2, err := net.Dial("tcp", addr)
		if err == nil {
			c2.Close()
		}
		return err != nil
	})
	// ...while the one in flight keeps working until it ends.
	if err := ping(c); err != nil {
		t.Fatalf("in-flight connection broken by Shutdown: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a connection in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := roundTrip(c, 1<<20, 1); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func TestShutdownTimeoutCloses(t *testing.T) { forEachEngine(t, testShutdownTimeoutCloses) }

func testShutdownTimeoutCloses(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", echo)
	s, err := New(withEngine(t, route0("127.0.0.1:0", b.addr, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	c := dialRoute(t, s, "r")
	defer c.Close()
	ping(c)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want deadline exceeded", err)
	}
	if !waitClosed(c, 5*time.Second) {
		t.Fatal("connection still open after Shutdown's deadline")
	}
}

func TestUpdate(t *testing.T) { forEachEngine(t, testUpdate) }

func testUpdate(t *testing.T) {
	leakCheck(t)
	b1 := startBackend(t, "tcp4", echo)
	b2 := startBackend(t, "tcp4", func(c net.Conn) { io.WriteString(c, "two") })
	cfg := route0("127.0.0.1:0", b1.addr, nil)
	s := startRelay(t, cfg)
	old := dialRoute(t, s, "r")
	defer old.Close()
	ping(old)

	// Add route "two", remove "r".
	cfg2 := Config{Routes: []Route{{Name: "two", Listen: mustAddr(t, "tcp://127.0.0.1:0"), Target: b2.addr}}}
	if err := s.Update(cfg2); err != nil {
		t.Fatal(err)
	}
	if s.Addrs("r") != nil {
		t.Fatal("route r still listed")
	}
	c := dialRoute(t, s, "two")
	defer c.Close()
	if got, _ := bufio.NewReader(c).ReadString('\n'); got != "two" {
		t.Fatalf("new route answered %q", got)
	}
	// The established connection on the removed route is untouched.
	if err := ping(old); err != nil {
		t.Fatalf("connection on removed route broken: %v", err)
	}
	// A changed setting applies to new connections only.
	cfg2.Routes[0].MaxConns = 1
	if err := s.Update(cfg2); err != nil {
		t.Fatal(err)
	}
	if len(s.Addrs("two")) != 1 {
		t.Fatal("route two lost its listener")
	}
	// Bad configs are refused and change nothing.
	if err := s.Update(Config{}); err == nil {
		t.Fatal("empty config accepted")
	}
}

func TestWorkers(t *testing.T) { forEachEngine(t, testWorkers) }

func testWorkers(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", echo)
	s := startRelay(t, route0("127.0.0.1:0", b.addr, func(r *Route) { r.Workers = 3 }))
	as := s.Addrs("r")
	if len(as) != 3 || as[0].String() != as[2].String() {
		t.Fatalf("addrs %v", as)
	}
	for range 20 {
		c := dialRoute(t, s, "r")
		if err := ping(c); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
}

func TestStartErrors(t *testing.T) { forEachEngine(t, testStartErrors) }

func testStartErrors(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, err := New(withEngine(t, route0(ln.Addr().String(), mustAddr(t, "tcp://127.0.0.1:9"), nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err == nil {
		s.Close()
		t.Fatal("Start on a port in use succeeded")
	} else if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Errorf("Start: %v; want EADDRINUSE naming %s", err, ln.Addr())
	}
	s.Close()
}

// TestStartAgain: after a Start that failed on an address in use, a
// second Start serves every route, and Shutdown then returns (the routes
// the failed Start had opened and closed are opened anew, not left
// half-stopped).
func TestStartAgain(t *testing.T) { forEachEngine(t, testStartAgain) }

func testStartAgain(t *testing.T) {
	leakCheck(t)
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := startBackend(t, "tcp4", echo)
	s, err := New(withEngine(t, Config{Routes: []Route{
		{Name: "a", Listen: Addr{Network: "tcp", Address: "127.0.0.1:0"}, Target: b.addr},
		{Name: "b", Listen: Addr{Network: "tcp", Address: busy.Addr().String()}, Target: b.addr},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err == nil {
		t.Fatal("Start on a port in use succeeded")
	}
	busy.Close()
	if err := s.Start(); err != nil {
		t.Fatalf("Start after the port was freed: %v", err)
	}
	for _, r := range []string{"a", "b"} {
		c := dialRoute(t, s, r)
		if err := ping(c); err != nil {
			t.Errorf("route %s: %v", r, err)
		}
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func TestDialFailure(t *testing.T) { forEachEngine(t, testDialFailure) }

func testDialFailure(t *testing.T) {
	leakCheck(t)
	ln, _ := net.Listen("tcp4", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	s := startRelay(t, route0("127.0.0.1:0", mustAddr(t, "tcp://"+dead), nil))
	c := dialRoute(t, s, "r")
	defer c.Close()
	if !waitClosed(c, 5*time.Second) {
		t.Fatal("client not closed after dial failure")
	}
	waitFor(t, func() bool { return s.Stats().Routes[0].DialErrors == 1 })
}

// TestChurnNoLeak opens and closes many short connections, some reset
// mid-transfer, and checks goroutines and fds return to where they were.
func TestChurnNoLeak(t *testing.T) { forEachEngine(t, testChurnNoLeak) }

func testChurnNoLeak(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", echo)
	s := startRelay(t, route0("127.0.0.1:0", b.addr, func(r *Route) { r.IdleTimeout = time.Second }))
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				c := dialRoute(t, s, "r")
				switch i % 3 {
				case 0:
					ping(c)
				case 1:
					c.(*net.TCPConn).SetLinger(0) // reset
					io.WriteString(c, "x")
				case 2:
					roundTrip(c, 10000+w, uint64(i))
				}
				c.Close()
			}
		}()
	}
	wg.Wait()
	waitFor(t, func() bool { return s.Stats().Active == 0 })
}

// TestIdleHoldsNoPipe: relayed connections that have moved bytes, short
// messages (read and written) and bulk (spliced), and gone quiet hold no
// pipe and no pooled buffer (splice's gauges).
func TestIdleHoldsNoPipe(t *testing.T) { forEachEngine(t, testIdleHoldsNoPipe) }

func testIdleHoldsNoPipe(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", echo)
	s := startRelay(t, route0("127.0.0.1:0", b.addr, nil))
	before := splice.ReadStats()
	bulk := make([]byte, 1<<20)
	for i := range bulk {
		bulk[i] = byte(i * 7)
	}
	back := make([]byte, len(bulk))
	var cs []net.Conn
	for i := range 50 {
		c := dialRoute(t, s, "r")
		defer c.Close()
		if err := ping(c); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 { // a bulk burst each way, then a short message again
			c.SetDeadline(time.Now().Add(30 * time.Second))
			errc := make(chan error, 1)
			go func() { _, err := c.Write(bulk); errc <- err }()
			if _, err := io.ReadFull(c, back); err != nil || !bytes.Equal(back, bulk) {
				t.Fatalf("bulk echo: %v", err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Time{})
			if err := ping(c); err != nil {
				t.Fatal(err)
			}
		}
		cs = append(cs, c)
	}
	if _, _, taken, ok := testEng(s).holding(); ok { // the engine's own pipes and buffers
		waitFor(t, func() bool {
			bufs, pipes, _, _ := testEng(s).holding()
			return bufs == 0 && pipes == 0
		})
		if taken == 0 {
			t.Errorf("the relay never took a pipe for bulk: not splicing?")
		}
	} else {
		waitFor(t, func() bool {
			st := splice.ReadStats()
			return st.PipesInUse == 0 && st.BuffersInUse == 0
		})
		if st := splice.ReadStats(); st.PipesCreated+st.PipesReused == before.PipesCreated+before.PipesReused && runtime.GOOS == "linux" {
			t.Errorf("the relay never took a pipe for bulk: not splicing? %+v", st)
		}
	}
	for _, c := range cs {
		if err := ping(c); err != nil {
			t.Fatalf("after idling: %v", err)
		}
	}
}

// TestUpdatePerClientLimit: a connection admitted while the route had no
// per-client limit took no slot, so its end must give none back. With the
// limit raised to 1 by Update, a client holding one connection is refused
// a second even after that older connection ends.
func TestUpdatePerClientLimit(t *testing.T) { forEachEngine(t, testUpdatePerClientLimit) }

func testUpdatePerClientLimit(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", echo)
	cfg := route0("127.0.0.1:0", b.addr, nil)
	s := startRelay(t, cfg)
	old := dialRoute(t, s, "r") // admitted under no limit
	defer old.Close()
	if err := ping(old); err != nil {
		t.Fatal(err)
	}
	cfg.Routes[0].MaxConnsPerClient = 1
	if err := s.Update(cfg); err != nil {
		t.Fatal(err)
	}
	held := dialRoute(t, s, "r") // the client's one slot
	defer held.Close()
	if err := ping(held); err != nil {
		t.Fatal(err)
	}
	old.Close()
	waitFor(t, func() bool { return s.Stats().Routes[0].Active == 1 })
	over := dialRoute(t, s, "r")
	defer over.Close()
	if !waitClosed(over, 5*time.Second) {
		t.Fatalf("limit 1 per client, but a second connection is relayed (active %d)", s.Stats().Routes[0].Active)
	}
	if st := s.Stats().Routes[0]; st.OverLimit != 1 {
		t.Errorf("OverLimit = %d", st.OverLimit)
	}
}

// TestRebindKeepsLimits: a rebind (here to two workers) replaces the
// route's listeners, but the relays it accepted before still count
// against its limits and in its Stats.
func TestRebindKeepsLimits(t *testing.T) { forEachEngine(t, testRebindKeepsLimits) }

func testRebindKeepsLimits(t *testing.T) {
	leakCheck(t)
	if err := reusePortSupported(); err != nil {
		t.Skip(err)
	}
	b := startBackend(t, "tcp4", echo)
	cfg := route0("127.0.0.1:0", b.addr, func(r *Route) { r.MaxConnsPerClient = 1 })
	s := startRelay(t, cfg)
	held := dialRoute(t, s, "r")
	defer held.Close()
	if err := ping(held); err != nil {
		t.Fatal(err)
	}
	cfg.Routes[0].Workers = 2
	if err := s.Update(cfg); err != nil {
		t.Fatal(err)
	}
	if len(s.Addrs("r")) != 2 {
		t.Fatal("route not rebound")
	}
	if st := s.Stats().Routes[0]; st.Active != 1 || st.Accepted != 1 {
		t.Errorf("after the rebind: active %d, accepted %d; want 1, 1", st.Active, st.Accepted)
	}
	over := func(limit string) {
		t.Helper()
		c := dialRoute(t, s, "r")
		defer c.Close()
		if !waitClosed(c, 5*time.Second) {
			t.Errorf("%s is 1, but a second connection is relayed (active %d)", limit, s.Stats().Routes[0].Active)
		}
	}
	over("MaxConnsPerClient")
	cfg.Routes[0].MaxConnsPerClient, cfg.Routes[0].MaxConns = 0, 1
	if err := s.Update(cfg); err != nil {
		t.Fatal(err)
	}
	// At MaxConns the rebound listeners pause: the client waits until the
	// old relay ends.
	c := dialRoute(t, s, "r")
	defer c.Close()
	waitFor(t, func() bool { return s.Stats().Routes[0].AcceptPaused })
	if st := s.Stats().Routes[0]; st.OverLimit != 1 {
		t.Errorf("OverLimit = %d, want 1", st.OverLimit)
	}
	held.Close()
	if err := ping(c); err != nil {
		t.Fatalf("after the old relay ended: %v", err)
	}
}

// TestRebindFails: a route whose new listen address is taken goes on
// where it was, with its old settings and its connections, and Update
// names it.
func TestRebindFails(t *testing.T) { forEachEngine(t, testRebindFails) }

func testRebindFails(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", echo)
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := route0("127.0.0.1:0", b.addr, nil)
	s := startRelay(t, cfg)
	before := s.Addrs("r")[0].String()
	held := dialRoute(t, s, "r")
	defer held.Close()
	if err := ping(held); err != nil {
		t.Fatal(err)
	}
	moved := cfg
	moved.Routes = []Route{cfg.Routes[0]}
	moved.Routes[0].Listen.Address = busy.Addr().String()
	moved.Routes[0].MaxConns = 1
	if err := s.Update(moved); err == nil || !strings.Contains(err.Error(), `route "r"`) {
		t.Fatalf("Update to an address in use: %v", err)
	}
	if as := s.Addrs("r"); len(as) != 1 || as[0].String() != before {
		t.Fatalf("route listens on %v, want %s as before", as, before)
	}
	c := dialRoute(t, s, "r") // MaxConns is still 0
	defer c.Close()
	if err := ping(c); err != nil {
		t.Fatalf("new connection after the failed rebind: %v", err)
	}
	if err := ping(held); err != nil {
		t.Fatalf("established connection after the failed rebind: %v", err)
	}
	if st := s.Stats().Routes[0]; st.Active != 2 || st.Listen != "tcp://127.0.0.1:0" {
		t.Errorf("Stats: active %d, listen %s", st.Active, st.Listen)
	}
	// The same config again still rebinds nothing.
	if err := s.Update(cfg); err != nil {
		t.Fatal(err)
	}
	if as := s.Addrs("r"); as[0].String() != before {
		t.Errorf("route moved to %v", as)
	}
}

// TestCloseDuringProxyHeader: a client still owing its PROXY header when
// the server closes is closed with it, not counted as a bad header.
func TestCloseDuringProxyHeader(t *testing.T) { forEachEngine(t, testCloseDuringProxyHeader) }

func testCloseDuringProxyHeader(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", echo)
	s := startRelay(t, route0("127.0.0.1:0", b.addr, func(r *Route) {
		r.AcceptProxy, r.ProxyHeaderTimeout = true, 30*time.Second
	}))
	c := dialRoute(t, s, "r")
	defer c.Close()
	waitFor(t, func() bool { return s.Stats().Active == 1 })
	s.Close()
	if !waitClosed(c, 5*time.Second) {
		t.Error("client not closed")
	}
	if st := s.Stats().Routes[0]; st.ProxyHeaderErrors != 0 {
		t.Errorf("%d PROXY header errors counted for a client the server closed", st.ProxyHeaderErrors)
	}
}

// TestPausedCountsOngoingWait: the time a route's accepting waits at its
// limit shows in Stats while the wait goes on, not only once it ends: a
// route held at its limit for an hour must not read 0 s for that hour.
func TestPausedCountsOngoingWait(t *testing.T) { forEachEngine(t, testPausedCountsOngoingWait) }

func testPausedCountsOngoingWait(t *testing.T) {
	b := startBackend(t, "tcp4", echo)
	s := startRelay(t, route0("127.0.0.1:0", b.addr, func(r *Route) { r.MaxConns = 1 }))
	held := dialRoute(t, s, "r")
	defer held.Close()
	if err := ping(held); err != nil {
		t.Fatal(err)
	}
	over := dialRoute(t, s, "r")
	defer over.Close()
	var during time.Duration
	waitFor(t, func() bool {
		st := s.Stats().Routes[0]
		during = st.Paused
		return st.AcceptPaused && st.Paused >= 20*time.Millisecond
	})
	held.Close()
	if err := ping(over); err != nil {
		t.Fatalf("waiting client after a slot freed: %v", err)
	}
	if st := s.Stats().Routes[0]; st.Paused < during {
		t.Errorf("Paused went back from %v to %v when the wait ended", during, st.Paused)
	}
}
