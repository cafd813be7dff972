package relay

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestListenUnixStale checks what a Unix route does with a file already at
// its path: a socket file nobody answers on (a crashed relay's) is replaced,
// a live socket and a file that is not a socket are left alone with
// EADDRINUSE.
func TestListenUnixStale(t *testing.T) { forEachEngine(t, testListenUnixStale) }

func testListenUnixStale(t *testing.T) {
	dir := shortTempDir(t)

	t.Run("stale socket", func(t *testing.T) {
		path := filepath.Join(dir, "stale.sock")
		old, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		old.SetUnlinkOnClose(false) // as if the process had died
		old.Close()
		ln, err := listenUnix(path, 0, owner{-1, -1})
		if err != nil {
			t.Fatalf("listenUnix over a stale socket: %v", err)
		}
		defer ln.Close()
		go func() {
			if c, err := ln.Accept(); err == nil {
				c.Close()
			}
		}()
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("dial the new listener: %v", err)
		}
		c.Close()
	})

	t.Run("live socket", func(t *testing.T) {
		path := filepath.Join(dir, "live.sock")
		live, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer live.Close()
		go func() { // answer the liveness probe
			for {
				c, err := live.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		ln, err := listenUnix(path, 0, owner{-1, -1})
		if err == nil {
			ln.Close()
			t.Fatal("listenUnix took over a live socket")
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("err = %v, want EADDRINUSE", err)
		}
		c, err := net.Dial("unix", path) // the live one still answers
		if err != nil {
			t.Fatalf("live socket gone: %v", err)
		}
		c.Close()
	})

	t.Run("not a socket", func(t *testing.T) {
		path := filepath.Join(dir, "data")
		if err := os.WriteFile(path, []byte("keep me"), 0o600); err != nil {
			t.Fatal(err)
		}
		ln, err := listenUnix(path, 0, owner{-1, -1})
		if err == nil {
			ln.Close()
			t.Fatal("listenUnix replaced a regular file")
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("err = %v, want EADDRINUSE", err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != "keep me" {
			t.Fatalf("file changed: %q, %v", b, err)
		}
	})

	t.Run("abstract", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skip("abstract Unix socket names are Linux only")
		}
		name := "@zeroio-test-" + filepath.Base(dir)
		a, err := listenUnix(name, 0, owner{-1, -1})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		if b, err := listenUnix(name, 0, owner{-1, -1}); err == nil {
			b.Close()
			t.Fatal("a second listener on one abstract name")
		} else if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("err = %v, want EADDRINUSE", err)
		}
	})
}

// TestUnixMode relays through a Unix listen socket whose file mode is set,
// checks the mode, and that a reload with another mode changes it.
func TestUnixMode(t *testing.T) { forEachEngine(t, testUnixMode) }

func testUnixMode(t *testing.T) {
	be := startBackend(t, "tcp4", echo)
	path := filepath.Join(shortTempDir(t), "m.sock")
	for _, mode := range []os.FileMode{0o600, 0o660, 0o666} {
		cfg := route0(path, be.addr, func(r *Route) { r.UnixMode = mode })
		s := startRelay(t, cfg)
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != mode {
			t.Fatalf("mode %#o: file is %v", mode, fi.Mode())
		}
		checkPing(t, path)
		// A reload with a new mode rebinds the socket with it.
		cfg.Routes[0].UnixMode = 0o640
		if err := s.Update(cfg); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
			t.Fatalf("after reload to 0640: %v, %v", fi.Mode(), err)
		}
		checkPing(t, path)
		s.Close()
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("socket file left after Close: %v", err)
		}
	}
}

func TestUnixModeInvalid(t *testing.T) {
	tcp := Addr{Network: "tcp", Address: "127.0.0.1:1"}
	for name, r := range map[string]Route{
		"tcp listen":    {Listen: Addr{Network: "tcp", Address: "127.0.0.1:0"}, Target: tcp, UnixMode: 0o600},
		"abstract name": {Listen: Addr{Network: "unix", Address: "@zeroio-mode"}, Target: tcp, UnixMode: 0o600},
		"setuid bit":    {Listen: Addr{Network: "unix", Address: "/tmp/zeroio-mode.sock"}, Target: tcp, UnixMode: 0o600 | os.ModeSetuid},
		"group on tcp":  {Listen: Addr{Network: "tcp", Address: "127.0.0.1:0"}, Target: tcp, UnixGroup: "0"},
		"unknown user":  {Listen: Addr{Network: "unix", Address: "/tmp/zeroio-mode.sock"}, Target: tcp, UnixUser: "no-such-user-zeroio"},
		"unknown group": {Listen: Addr{Network: "unix", Address: "/tmp/zeroio-mode.sock"}, Target: tcp, UnixGroup: "no-such-group-zeroio"},
	} {
		if _, err := New(Config{Routes: []Route{r}}); err == nil || !strings.Contains(err.Error(), "unix ") {
			t.Errorf("%s: err = %v, want a unix mode, user or group error", name, err)
		}
	}
}

// checkPing pings the echo backend through the relay's socket at path.
func checkPing(t *testing.T, path string) {
	t.Helper()
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := ping(c); err != nil {
		t.Fatal(err)
	}
}

// TestListenTwice: two routes on one Unix socket path, or one TCP port,
// with no SNI or ALPN to tell them apart, or on one UDP port, are refused
// when the config is validated, not at bind; port 0 twice is two ports.
func TestListenTwice(t *testing.T) {
	tcp := Addr{Network: "tcp", Address: "127.0.0.1:1"}
	for _, tc := range []struct {
		listen string
		ok     bool
	}{
		{"unix:///tmp/zeroio-twice.sock", false},
		{"unix://@zeroio-twice", false},
		{"tcp://127.0.0.1:8080", false},
		{"udp://127.0.0.1:8080", false},
		{"tcp://127.0.0.1:0", true},
	} {
		l := mustAddr(t, tc.listen)
		r := Route{Listen: l, Target: tcp}
		if l.Datagram() {
			r.Target = Addr{Network: "udp", Address: "127.0.0.1:1"}
		}
		a, b := r, r
		a.Name, b.Name = "a", "b"
		_, err := New(Config{Routes: []Route{a, b}})
		if tc.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "used twice") && !strings.Contains(err.Error(), "can match the same client")) {
			t.Errorf("%s twice: err = %v, want ok=%v", tc.listen, err, tc.ok)
		}
	}
}
