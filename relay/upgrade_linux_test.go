package relay

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// unixPair returns the two ends of a Unix stream socketpair, closed when
// the test ends.
func unixPair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cs [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c.(*net.UnixConn)
		t.Cleanup(func() { c.Close() })
	}
	return cs[0], cs[1]
}

// handOver hands a over to a new Server for cfg, on the engine of t, and
// returns it, shut down when the test ends.
func handOver(t testing.TB, a *Server, cfg Config) *Server {
	t.Helper()
	b, err := tryHandOver(t, a, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tryHandOver hands a over as handOver does, returning either side's
// error.
func tryHandOver(t testing.TB, a *Server, cfg Config) (*Server, error) {
	t.Helper()
	ca, cb := unixPair(t)
	errc := make(chan error, 1)
	go func() { errc <- a.HandOver(ca) }()
	b, terr := TakeOver(withEngine(t, cfg), cb)
	herr := <-errc
	if b != nil {
		t.Cleanup(func() { shutdown(t, b) })
	}
	if terr != nil || herr != nil {
		if b != nil {
			t.Errorf("TakeOver succeeded (%v) where HandOver failed (%v)", terr, herr)
		}
		if herr == nil {
			t.Errorf("HandOver succeeded where TakeOver failed: %v", terr)
		}
		return nil, errors.Join(herr, terr)
	}
	return b, nil
}

func shutdown(t testing.TB, s *Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// upgradeConfig has a TCP route held at one stream, a Unix socket route
// and a UDP route, all to echo targets.
func upgradeConfig(t *testing.T) Config {
	be := startBackend(t, "tcp4", echo)
	ue := udpEcho(t, "udp4", "127.0.0.1:0")
	path := filepath.Join(shortTempDir(t), "r.sock")
	return Config{Routes: []Route{
		{Name: "t", Listen: Addr{Network: "tcp", Address: "127.0.0.1:0"}, Target: be.addr, MaxConns: 1},
		{Name: "x", Listen: Addr{Network: "unix", Address: path}, Target: be.addr},
		{Name: "u", Listen: Addr{Network: "udp", Address: "127.0.0.1:0"}, Target: Addr{Network: "udp", Address: ue.LocalAddr().String()}},
	}}
}

// sameAddrs gives the routes of cfg the addresses s listens on, as a new
// process given the same configuration with fixed ports would name them.
func sameAddrs(cfg Config, s *Server) Config {
	rs := append([]Route(nil), cfg.Routes...)
	for i := range rs {
		if rs[i].Listen.Network != "unix" {
			rs[i].Listen.Address = s.Addrs(rs[i].Name)[0].String()
		}
	}
	cfg.Routes = rs
	return cfg
}

func askEcho(t testing.TB, c net.Conn, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("echo %q: got %q, %v", msg, buf, err)
	}
}

// expectRead reads len(want) bytes from c, which must be want.
func expectRead(t testing.TB, c net.Conn, want string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != want {
		t.Fatalf("read %q: got %q, %v", want, buf, err)
	}
}

func dialAddr(t testing.TB, a net.Addr) net.Conn {
	t.Helper()
	c, err := net.DialTimeout(a.Network(), a.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestHandOverListeners: the listening sockets go over, TCP, Unix and
// UDP, with the client queued on one (its route at its limit); the new
// Server serves them all, the Unix socket file stays, and the old one
// frees every descriptor once its streams (goroutine engine) end.
func TestHandOverListeners(t *testing.T) { forEachEngine(t, testHandOverListeners) }

func testHandOverListeners(t *testing.T) {
	leakCheck(t)
	cfg := upgradeConfig(t)
	a := startRelay(t, cfg)
	cfg = sameAddrs(cfg, a)
	held := dialAddr(t, a.Addrs("t")[0])
	askEcho(t, held, "held")
	queued := dialAddr(t, a.Addrs("t")[0]) // at MaxConns: waits in the backlog
	uc := dialUDP(t, a.Addrs("u")[0].(*net.UDPAddr))
	if got := askUDP(uc); got != "who?" {
		t.Fatalf("UDP before: %q", got)
	}
	queued.Write([]byte("queued"))

	b := handOver(t, a, cfg)
	askEcho(t, held, "still")
	held.Close()
	expectRead(t, queued, "queued")
	shutdown(t, a)

	if _, err := os.Stat(cfg.Routes[1].Listen.Address); err != nil {
		t.Fatalf("Unix socket file: %v", err)
	}
	for _, name := range []string{"x"} {
		c := dialAddr(t, b.Addrs(name)[0])
		askEcho(t, c, "new "+name)
	}
	if got := askUDP(uc); got != "who?" {
		t.Fatalf("UDP after: %q", got)
	}
	queued.Close()
	c := dialAddr(t, b.Addrs("t")[0])
	askEcho(t, c, "new t")
}

// TestHandOverRefused: each way a hand-over can fail before the commit
// leaves the sender serving every listener and stream as before.
func TestHandOverRefused(t *testing.T) { forEachEngine(t, testHandOverRefused) }

func testHandOverRefused(t *testing.T) {
	leakCheck(t)
	defer func(d time.Duration) { handOverStep = d }(handOverStep)
	handOverStep = 300 * time.Millisecond
	cases := []struct {
		name string
		peer func(t *testing.T, c *net.UnixConn, cfg Config)
		want string
	}{
		{"receiver refuses its config", func(t *testing.T, c *net.UnixConn, cfg Config) {
			cfg.Routes = cfg.Routes[:1] // the Unix and UDP sockets are unclaimed
			if _, err := TakeOver(withEngine(t, cfg), c); err == nil || !strings.Contains(err.Error(), "no route") {
				t.Errorf("TakeOver: %v", err)
			}
		}, "no route listens on the inherited socket"},
		{"garbage", func(t *testing.T, c *net.UnixConn, _ Config) {
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
		}, "does not speak"},
		{"other version", func(t *testing.T, c *net.UnixConn, _ Config) {
			b := appendFrameHeader(nil, frReady, 0, 0)
			b[5] = 9
			c.Write(b)
		}, "version 9"},
		{"silent", func(t *testing.T, c *net.UnixConn, _ Config) {}, "timeout"},
		{"receiver dies after ready", func(t *testing.T, c *net.UnixConn, _ Config) {
			for {
				h, _, fds, err := readFrame(c)
				closeFDs(fds)
				if err != nil {
					t.Error(err)
					return
				}
				if h.typ == frEnd {
					break
				}
			}
			writeFrame(c, frReady, nil, nil)
			c.Close()
		}, ""},
	}
	cfg := upgradeConfig(t)
	a := startRelay(t, cfg)
	cfg = sameAddrs(cfg, a)
	held := dialAddr(t, a.Addrs("t")[0])
	askEcho(t, held, "held")
	uc := dialUDP(t, a.Addrs("u")[0].(*net.UDPAddr))
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			ca, cb := unixPair(t)
			done := make(chan struct{})
			go func() { defer close(done); tc.peer(t, cb, cfg) }()
			err := a.HandOver(ca)
			<-done
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("HandOver: %v, want an error with %q", err, tc.want)
			}
			askEcho(t, held, "after "+tc.name)
			for _, name := range []string{"t", "x"} {
				if name == "t" {
					continue // at its limit: the held stream has the slot
				}
				askEcho(t, dialAddr(t, a.Addrs(name)[0]), "new "+name)
			}
			if got := askUDP(uc); got != "who?" {
				t.Fatalf("UDP: %q", got)
			}
		})
	}
	// And the listeners still go over, queue and all, after all that.
	queued := dialAddr(t, a.Addrs("t")[0])
	queued.Write([]byte("q"))
	b := handOver(t, a, cfg)
	held.Close()
	expectRead(t, queued, "q")
	queued.Close()
	askEcho(t, dialAddr(t, b.Addrs("x")[0]), "new x")
}

// TestHandOverBusy: a second HandOver while one waits for its peer fails
// at once.
func TestHandOverBusy(t *testing.T) {
	defer func(d time.Duration) { handOverStep = d }(handOverStep)
	handOverStep = 2 * time.Second
	be := startBackend(t, "tcp4", echo)
	a := startRelay(t, route0("127.0.0.1:0", be.addr, nil))
	ca, _ := unixPair(t)
	errc := make(chan error, 1)
	go func() { errc <- a.HandOver(ca) }()
	waitFor(t, func() bool { return a.handing.Load() })
	c2, _ := unixPair(t)
	start := time.Now()
	if err := a.HandOver(c2); !errors.Is(err, errHandOverBusy) {
		t.Fatalf("second HandOver: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("second HandOver took %v", d)
	}
	if err := <-errc; err == nil {
		t.Fatal("HandOver to a silent peer succeeded")
	}
}
