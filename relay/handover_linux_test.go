package relay

import (
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSteer: a socket opened alone joins a SO_REUSEPORT group once the
// option is set on it, and steer sends every new connection to the first
// n sockets of the group.
func TestSteer(t *testing.T) {
	r := &Route{Listen: Addr{"tcp", "127.0.0.1:0"}, Workers: 1}
	first, err := listenStream(r)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(first)
	if err := enableReusePort(first[0]); err != nil {
		t.Fatal(err)
	}
	more, err := listenStreamAt(r, first[0].Addr().String(), 2, true)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(more)
	lns := append(first, more...)
	if err := steer(lns[0], 1); errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPERM) {
		t.Skipf("SO_ATTACH_REUSEPORT_CBPF refused by this kernel or its sandbox: %v", err)
	} else if err != nil {
		t.Fatalf("steer: %v", err)
	}
	const n = 50
	for range n {
		c, err := net.Dial("tcp", lns[0].Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	count := func(ln net.Listener) int {
		k := 0
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
		for {
			c, err := ln.Accept()
			if err != nil {
				return k
			}
			c.Close()
			k++
		}
	}
	if got := count(lns[0]); got != n {
		t.Errorf("first socket accepted %d of %d", got, n)
	}
	for i, ln := range more {
		if got := count(ln); got != 0 {
			t.Errorf("socket %d accepted %d after steering", i+1, got)
		}
	}
}
