package relay

import (
	"errors"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestAcceptBackoffOnEMFILE runs the process out of descriptors so that
// accept fails with EMFILE: the relay must count the error, back off
// rather than spin, and serve the waiting client once descriptors are
// free again.
func TestAcceptBackoffOnEMFILE(t *testing.T) { forEachEngine(t, testAcceptBackoffOnEMFILE) }

func testAcceptBackoffOnEMFILE(t *testing.T) {
	b := startBackend(t, "tcp4", echo)
	s := startRelay(t, route0("127.0.0.1:0", b.addr, nil))
	release := hogFDs(t, 1) // for the client
	defer release()
	c, err := net.DialTimeout("tcp", s.Addrs("r")[0].String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, func() bool { return s.Stats().Routes[0].AcceptErrors > 0 })
	time.Sleep(200 * time.Millisecond)
	// Backoff: 5 ms doubling to 1 s, so a handful of errors, not thousands.
	if n := s.Stats().Routes[0].AcceptErrors; n > 20 {
		t.Errorf("%d accept errors in 200 ms: spinning", n)
	}
	release()
	if err := ping(c); err != nil {
		t.Fatalf("waiting client not served after descriptors freed: %v", err)
	}
}

// hogFDs takes every free descriptor of the process but n, and returns
// the function that gives them back (once). It skips the test if the
// limit is too high to exhaust.
func hogFDs(t *testing.T, n int) (release func()) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<16 {
		t.Skipf("descriptor limit %d too high to exhaust (%v)", lim.Cur, err)
	}
	// Descriptors that earlier tests' connections and pooled pipes free
	// late are taken too, until none has come free for a while: one
	// freed later would be one more free than meant.
	var hog []*os.File
	release = func() {
		for _, f := range hog {
			f.Close()
		}
		hog = nil
	}
	soak := func() (n int) {
		for {
			f, err := os.Open(os.DevNull)
			if err != nil {
				if !errors.Is(err, syscall.EMFILE) {
					release()
					t.Fatal(err)
				}
				return n
			}
			hog = append(hog, f)
			n++
		}
	}
	runtime.GC()
	runtime.GC()
	soak()
	for quiet := 0; quiet < 5; {
		time.Sleep(20 * time.Millisecond)
		if soak() == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
	for _, f := range hog[len(hog)-n:] {
		f.Close()
	}
	hog = hog[:len(hog)-n]
	return release
}

// TestDialWaitsForDescriptor: a client accepted with the process's last
// descriptor finds none left for the target's socket. That is no fault
// of the target: the dial waits for a descriptor within the dial
// timeout, and the client is served once one frees, the target never
// marked down.
func TestDialWaitsForDescriptor(t *testing.T) { forEachEngine(t, testDialWaitsForDescriptor) }

func testDialWaitsForDescriptor(t *testing.T) {
	b := startBackend(t, "tcp4", echo)
	s := startRelay(t, route0("127.0.0.1:0", b.addr, nil))
	first := dialRoute(t, s, "r") // the engine started, its buffers warm
	if err := ping(first); err != nil {
		t.Fatal(err)
	}
	first.Close()
	release := hogFDs(t, 2) // for the client, and the relay's accept
	defer release()
	c, err := net.DialTimeout("tcp", s.Addrs("r")[0].String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, func() bool { return s.Stats().Routes[0].Accepted == 2 })
	time.Sleep(100 * time.Millisecond) // the dial finds no descriptor meanwhile
	release()
	if err := ping(c); err != nil {
		t.Fatalf("client not served once a descriptor freed: %v", err)
	}
	if ts := s.Stats().Routes[0].Targets[0]; !ts.Up || ts.DialErrors != 0 {
		t.Errorf("target marked down for the relay's lack of descriptors: %+v", ts)
	}
}
