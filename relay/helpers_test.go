package relay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// mustAddr parses a test address.
func mustAddr(t testing.TB, s string) Addr {
	t.Helper()
	a, err := ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// testBackend is a real target server on loopback or a Unix socket.
type testBackend struct {
	ln    net.Listener
	addr  Addr
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

// startBackend serves handler for every connection on network ("tcp4",
// "tcp6" or "unix").
func startBackend(t testing.TB, network string, handler func(net.Conn)) *testBackend {
	t.Helper()
	var ln net.Listener
	var err error
	var a Addr
	switch network {
	case "unix":
		path := filepath.Join(shortTempDir(t), "b.sock")
		ln, err = net.Listen("unix", path)
		a = Addr{Network: "unix", Address: path}
	case "tcp6":
		ln, err = net.Listen("tcp6", "[::1]:0")
	default:
		ln, err = net.Listen("tcp4", "127.0.0.1:0")
	}
	if err != nil {
		t.Fatalf("listen %s: %v", network, err)
	}
	if network != "unix" {
		a = Addr{Network: "tcp", Address: ln.Addr().String()}
	}
	return serveBackend(t, ln, a, handler)
}

// serveBackend serves handler for every connection ln accepts, until
// the test ends.
func serveBackend(t testing.TB, ln net.Listener, a Addr, handler func(net.Conn)) *testBackend {
	b := &testBackend{ln: ln, addr: a}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				// Out of descriptors (TestAcceptBackoffOnEMFILE, when
				// a collected pipe's cleanup frees one meanwhile):
				// the connection waits in the queue; try again.
				time.Sleep(5 * time.Millisecond)
				continue
			}
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
			b.wg.Add(1)
			go func() { defer b.wg.Done(); defer c.Close(); handler(c) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
		b.wg.Wait()
	})
	return b
}

// shortTempDir keeps Unix socket paths under the 108-byte limit.
func shortTempDir(t testing.TB) string {
	d, err := os.MkdirTemp("", "zr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// echo copies everything back and half-closes when the client does.
//
// It copies through a buffer, not by the *net.TCPConn's ReadFrom: that
// splices through the standard library's pipe pool, whose pipes are closed
// only by GC cleanups, and under load those ran after leakCheck's window.
func echo(c net.Conn) {
	io.Copy(struct{ io.Writer }{c}, struct{ io.Reader }{c})
	closeWrite(c)
}

func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("no CloseWrite")
}

// forEachEngine runs test once per engine this platform has, each as a
// subtest named engine=NAME. Inside it, startRelay and withEngine give
// the configs they build that engine.
func forEachEngine(t *testing.T, test func(t *testing.T)) {
	for _, e := range engineNames() {
		t.Run("engine="+e, test)
	}
}

// withEngine sets cfg.Engine, if unset, to the engine named by the
// engine=NAME element of t's name (see forEachEngine).
func withEngine(t testing.TB, cfg Config) Config {
	if cfg.Engine != "" {
		return cfg
	}
	for _, el := range strings.Split(t.Name(), "/") {
		if e, ok := strings.CutPrefix(el, "engine="); ok {
			cfg.Engine = e
		}
	}
	return cfg
}

// startRelay runs a Server for routes, on the engine of t (withEngine),
// and returns it; it is shut down and checked for leftover connections
// at cleanup.
func startRelay(t testing.TB, cfg Config) *Server {
	t.Helper()
	s, err := New(withEngine(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s
}

// route0 is a one-route config listening on an ephemeral port.
func route0(listen string, target Addr, mod func(*Route)) Config {
	r := Route{Name: "r", Listen: Addr{Network: "tcp", Address: listen}, Target: target}
	if strings.HasPrefix(listen, "/") || strings.HasPrefix(listen, "@") {
		r.Listen = Addr{Network: "unix", Address: listen}
	}
	if mod != nil {
		mod(&r)
	}
	return Config{Routes: []Route{r}}
}

func dialRoute(t testing.TB, s *Server, name string) net.Conn {
	t.Helper()
	a := s.Addrs(name)[0]
	c, err := net.DialTimeout(a.Network(), a.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// eachClient runs n clients of route name at once, each on a connection
// of its own that fn uses and eachClient closes, and waits for all.
func eachClient(t testing.TB, s *Server, name string, n int, fn func(i int, c net.Conn)) {
	t.Helper()
	a := s.Addrs(name)[0]
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout(a.Network(), a.String(), 5*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			fn(i, c)
		}()
	}
	wg.Wait()
}

// roundTrip sends size random bytes through c, reads the echo, and
// compares SHA-256 sums of both directions.
func roundTrip(c net.Conn, size int, seed uint64) error {
	c.SetDeadline(time.Now().Add(60 * time.Second))
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	data := make([]byte, size)
	for i := 0; i+8 <= len(data); i += 8 {
		v := rng.Uint64()
		copy(data[i:], []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24), byte(v >> 32), byte(v >> 40), byte(v >> 48), byte(v >> 56)})
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = closeWrite(c)
		}
		errc <- err
	}()
	h := sha256.New()
	n, err := io.Copy(h, c)
	if werr := <-errc; werr != nil {
		return fmt.Errorf("write: %w", werr)
	}
	if err != nil {
		return fmt.Errorf("read after %d bytes: %w", n, err)
	}
	if want := sha256.Sum256(data); n != int64(size) || !bytes.Equal(h.Sum(nil), want[:]) {
		return fmt.Errorf("echo mismatch: %d bytes back of %d", n, size)
	}
	return nil
}

// leakCheck records goroutines and fds now and, at cleanup, waits for them
// to return to that level.
//
// Descriptors that the standard library closes in GC cleanups (its splice
// pipe pool, *os.File dropped without Close) are freed only after
// collections, so the check collects while it waits.
func leakCheck(t testing.TB) {
	runtime.GC()
	runtime.GC()
	g0, f0 := runtime.NumGoroutine(), countFDs()
	t.Cleanup(func() {
		var g, f int
		for range 200 {
			runtime.GC()
			g, f = runtime.NumGoroutine(), countFDs()
			if g <= g0 && f <= f0 {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		buf := make([]byte, 1<<16)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("leak: goroutines %d -> %d, fds %d -> %d %v\n%s", g0, g, f0, f, fdKinds(), buf)
	})
}

// fdKinds counts the open descriptors by what they are: "pipe",
// "socket", "anon_inode:[eventpoll]", a path.
func fdKinds() map[string]int {
	es, _ := os.ReadDir("/proc/self/fd")
	m := make(map[string]int)
	for _, e := range es {
		s, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue
		}
		if i := strings.Index(s, ":["); i > 0 && !strings.HasPrefix(s, "anon_inode") {
			s = s[:i]
		}
		m[s]++
	}
	return m
}

func countFDs() int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(es)
}

// waitClosed reports whether the peer closed c within d (read gets EOF or
// a reset rather than a timeout).
func waitClosed(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// testEngine is what tests ask of an engine, beside its seam (engine).
type testEngine interface {
	// inFlight lists the connections in flight. The Server's mu is
	// held.
	inFlight() []connInfo
	// holding reports, if the engine keeps them itself (ok), the
	// buffers and pipes its relays hold now and the pipes they ever
	// took.
	holding() (bufs, pipes, pipesTaken int64, ok bool)
}

// testEng returns s's engine as tests see it.
func testEng(s *Server) testEngine { return s.eng.(testEngine) }

// connInfo describes a connection in flight: its sockets (-1 for none
// yet) and whether the dial to its target is under way.
type connInfo struct {
	client, target int
	dialing        bool
}
