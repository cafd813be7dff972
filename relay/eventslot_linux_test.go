package relay

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSlotWaiterKeepsItsEnd: a client that a loop accepted and handed
// to another while the limit was full (another loop took the last slot
// meanwhile) waits there for a slot. Its bytes and its end, sent while
// it waited, must reach the target once a slot frees, and the target's
// reply and end come back: the loop saw the client's end reported while
// it waited, and no new edge comes for it.
func TestSlotWaiterKeepsItsEnd(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", echo)
	cfg := route0("127.0.0.1:0", b.addr, nil)
	cfg.Engine, cfg.MaxConns = EngineEvent, 1
	s := startRelay(t, cfg)
	first := dialRoute(t, s, "r") // takes the only slot, and starts the loops
	defer first.Close()
	if err := ping(first); err != nil {
		t.Fatal(err)
	}

	// The client, accepted here and handed to a loop as acceptAll hands
	// one to another loop, has sent its request and its end.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(client, "request"); err != nil {
		t.Fatal(err)
	}
	if err := closeWrite(client); err != nil {
		t.Fatal(err)
	}
	rc, err := accepted.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	rc.Control(func(f uintptr) { fd, err = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) })
	if err != nil {
		t.Fatal(err)
	}
	peer := addrPort(accepted.RemoteAddr())
	accepted.Close()
	var f *front
	for _, fr := range s.fronts {
		f = fr
	}
	lp := s.eng.(*eventEngine).started()[0]
	s.connWG.Add(1)
	lp.pass(f, fd, peer, true)

	// It waits for the slot, its end seen.
	waitFor(t, func() bool {
		seen := false
		lp.call(func() {
			for _, c := range lp.conns {
				if c.state == stSlot && c.cfd >= 0 && c.cHup {
					seen = true
				}
			}
		})
		return seen
	})
	first.Close()
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(client)
	if err != nil || string(got) != "request" {
		t.Fatalf("client got %q, %v; want the echo and the target's end", got, err)
	}
}
