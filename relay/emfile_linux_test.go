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
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<16 {
		t.Skipf("descriptor limit %d too high to exhaust (%v)", lim.Cur, err)
	}
	// Take every free descriptor, then give one back for the client.
	// Descriptors that earlier tests' connections and pooled pipes free
	// late are taken too, until none has come free for a while: one
	// freed after the client dialled would let the relay accept it.
	var hog []*os.File
	defer func() {
		for _, f := range hog {
			f.Close()
		}
	}()
	soak := func() (n int) {
		for {
			f, err := os.Open(os.DevNull)
			if err != nil {
				if !errors.Is(err, syscall.EMFILE) {
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
	hog[len(hog)-1].Close()
	hog = hog[:len(hog)-1]
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
	for _, f := range hog {
		f.Close()
	}
	hog = nil
	if err := ping(c); err != nil {
		t.Fatalf("waiting client not served after descriptors freed: %v", err)
	}
}
