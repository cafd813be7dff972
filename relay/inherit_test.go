package relay

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// inheritFile opens a socket as a launcher would and returns its file,
// with the socket open only through that file.
func inheritFile(t *testing.T, network, addr string) *os.File {
	t.Helper()
	var f *os.File
	var err error
	if strings.HasPrefix(network, "udp") {
		var pc net.PacketConn
		if pc, err = net.ListenPacket(network, addr); err != nil {
			t.Fatal(err)
		}
		f, err = pc.(*net.UDPConn).File()
		pc.Close()
	} else {
		var ln net.Listener
		if ln, err = net.Listen(network, addr); err != nil {
			t.Fatal(err)
		}
		if ul, ok := ln.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false)
		}
		f, err = ln.(interface{ File() (*os.File, error) }).File()
		ln.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// newInheriting returns a Server for cfg that was given files.
func newInheriting(t *testing.T, cfg Config, files []*os.File, names []string) *Server {
	t.Helper()
	s, err := New(withEngine(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Inherit(files, names); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s
}

func TestInherit(t *testing.T) { forEachEngine(t, testInherit) }

func testInherit(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("package net makes no listener from a file on windows")
	}
	t.Run("tcp", func(t *testing.T) {
		leakCheck(t)
		b := startBackend(t, "tcp4", echo)
		f := inheritFile(t, "tcp4", "127.0.0.1:0")
		addr := netAddrPortOfFile(t, f)
		s := newInheriting(t, route0(addr, b.addr, nil), []*os.File{f}, nil)
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		if got := s.Addrs("r")[0].String(); got != addr {
			t.Fatalf("route listens on %s, want the inherited %s", got, addr)
		}
		c := dialRoute(t, s, "r")
		defer c.Close()
		if err := ping(c); err != nil {
			t.Fatal(err)
		}
		// A reload keeps the socket, and one that drops the route and
		// one that brings it back find it again.
		cfg := route0(addr, b.addr, nil)
		other := route0("127.0.0.1:0", b.addr, func(r *Route) { r.Name = "other" })
		for _, step := range []Config{other, cfg} {
			if err := s.Update(withEngine(t, step)); err != nil {
				t.Fatal(err)
			}
		}
		c2 := dialRoute(t, s, "r")
		defer c2.Close()
		if err := ping(c2); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("tcp-workers", func(t *testing.T) {
		if err := reusePortSupported(); err != nil {
			t.Skip(err)
		}
		leakCheck(t)
		b := startBackend(t, "tcp4", echo)
		f := inheritFile(t, "tcp4", "127.0.0.1:0")
		addr := netAddrPortOfFile(t, f)
		s := newInheriting(t, route0(addr, b.addr, func(r *Route) { r.Workers = 3 }), []*os.File{f}, nil)
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		if n := len(s.Addrs("r")); n != 3 {
			t.Fatalf("%d listeners, want the inherited one and 2 bound beside it", n)
		}
		eachClient(t, s, "r", 12, func(_ int, c net.Conn) {
			if err := ping(c); err != nil {
				t.Error(err)
			}
		})
	})
	t.Run("unix-by-name", func(t *testing.T) {
		leakCheck(t)
		b := startBackend(t, "tcp4", echo)
		path := filepath.Join(shortTempDir(t), "l.sock")
		f := inheritFile(t, "unix", path)
		// Named after the route, the socket is the route's whatever
		// address the route gives.
		cfg := route0(filepath.Join(filepath.Dir(path), "other.sock"), b.addr, nil)
		s := newInheriting(t, cfg, []*os.File{f}, []string{"r"})
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := ping(c); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("udp", func(t *testing.T) {
		leakCheck(t)
		echoSrv := udpEcho(t, "udp4", "127.0.0.1:0")
		f := inheritFile(t, "udp4", "127.0.0.1:0")
		addr := netAddrPortOfFile(t, f)
		cfg := Config{Routes: []Route{{Name: "u", Listen: Addr{Network: "udp", Address: addr},
			Target: Addr{Network: "udp", Address: echoSrv.LocalAddr().String()}}}}
		s := newInheriting(t, cfg, []*os.File{f}, nil)
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("udp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		buf := make([]byte, 16)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Read(buf); err != nil || string(buf[:n]) != "ping" {
			t.Fatalf("echo %q, %v", buf[:n], err)
		}
	})
	t.Run("unclaimed", func(t *testing.T) {
		leakCheck(t)
		b := startBackend(t, "tcp4", echo)
		f := inheritFile(t, "tcp4", "127.0.0.1:0")
		addr := netAddrPortOfFile(t, f)
		s := newInheriting(t, route0("127.0.0.1:0", b.addr, nil), []*os.File{f}, []string{"web"})
		err := s.Start()
		if err == nil || !strings.Contains(err.Error(), `"web" (tcp `+addr+")") {
			t.Fatalf("Start: %v, want an error naming the unclaimed socket at %s", err, addr)
		}
	})
}

// netAddrPortOfFile returns the local address of the socket of f.
func netAddrPortOfFile(t *testing.T, f *os.File) string {
	t.Helper()
	in, err := inspectInherited(f)
	if err != nil {
		t.Fatal(err)
	}
	return in.addr.String()
}

func TestInheritRefusesConnections(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("package net makes no listener from a file on windows")
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f, err := c.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := New(route0("127.0.0.1:0", mustAddr(t, "tcp://127.0.0.1:1"), nil))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Inherit([]*os.File{f}, nil); err == nil || !strings.Contains(err.Error(), "does not listen") {
		t.Fatalf("Inherit of a connection: %v", err)
	}
}
