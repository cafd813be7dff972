package relay

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fullUnixTarget is a Unix socket whose listener never accepts and whose
// queue is full: a non-blocking connect(2) to it fails at once with
// EAGAIN (unix(7)), where a TCP connect would be left waiting.
func fullUnixTarget(t *testing.T) Addr {
	t.Helper()
	path := filepath.Join(shortTempDir(t), "full.sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		c, err := net.DialTimeout("unix", path, 100*time.Millisecond)
		if err != nil {
			break // the queue is full
		}
		t.Cleanup(func() { c.Close() })
		if i == 10 {
			t.Fatal("unix socket's queue never filled")
		}
	}
	// The dials above were blocking ones; check that a non-blocking one
	// now fails with EAGAIN, the case this target is for.
	nb, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(nb)
	if err := unix.Connect(nb, &unix.SockaddrUnix{Name: path}); err != unix.EAGAIN {
		t.Skipf("non-blocking connect to a full unix socket: %v, not EAGAIN", err)
	}
	return Addr{Network: "unix", Address: path}
}

// TestUnixTargetQueueFull: a Unix target whose queue is full refuses a
// connect with EAGAIN; the client goes on to the route's next target,
// and with no other target it is closed at once rather than left waiting.
func TestUnixTargetQueueFull(t *testing.T) { forEachEngine(t, testUnixTargetQueueFull) }

func testUnixTargetQueueFull(t *testing.T) {
	full := fullUnixTarget(t)
	live := startBackend(t, "tcp4", echo)
	s := startRelay(t, targetsRoute(nil, full, live.addr))
	for i := range 6 {
		c := dialRoute(t, s, "r")
		if err := roundTrip(c, 1000, uint64(i)); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		c.Close()
	}
	if st := targetStats(s, 0); st.Up || st.DialErrors == 0 {
		t.Errorf("full unix target: %+v; want down after a refused connect", st)
	}

	alone := startRelay(t, targetsRoute(func(r *Route) { r.DialTimeout = 30 * time.Second }, full))
	c := dialRoute(t, alone, "r")
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second)) // well before the dial timeout
	if n, err := c.Read(make([]byte, 1)); n != 0 || isTimeout(err) {
		t.Fatalf("only target full: read %d, %v; want the client closed at once", n, err)
	}
}
