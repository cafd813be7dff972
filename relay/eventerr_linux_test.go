package relay

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestResetWhileStalled: on the event engine, a client that resets while
// its upload waits for a target that does not read ends the connection at
// once, closing the target's socket, rather than at the idle timeout; so
// does a target that resets while its client does not read. The pump
// reads neither of them then, so only the reset's error event tells.
func TestResetWhileStalled(t *testing.T) {
	for _, side := range []string{"client", "target"} {
		t.Run("reset="+side, func(t *testing.T) {
			leakCheck(t)
			stop := make(chan struct{})
			b := startBackend(t, "tcp4", func(c net.Conn) {
				if side == "target" {
					fill(c)
					c.(*net.TCPConn).SetLinger(0)
					c.Close()
				}
				<-stop // never reads
			})
			t.Cleanup(func() { close(stop) }) // before the backend's cleanup
			cfg := route0("127.0.0.1:0", b.addr, nil)
			cfg.Engine = EngineEvent
			s := startRelay(t, cfg)
			c := dialRoute(t, s, "r")
			defer c.Close()
			if side == "client" {
				fill(c)
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
			waitFor(t, func() bool { st := s.Stats().Routes[0]; return st.Relayed == 1 && st.CopyErrors == 1 })
		})
	}
}

// fill writes to c until its peer's and the relay's buffers are full and
// a write blocks.
func fill(c net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := c.Write(buf); err != nil {
			c.SetWriteDeadline(time.Time{})
			return
		}
	}
}

// TestResetWhileDialing: on the event engine, a client that resets while
// its target does not answer the connect ends at once, giving back its
// slot, rather than holding it until the dial timeout; the target, which
// the client left before it could answer, is not marked down.
func TestResetWhileDialing(t *testing.T) {
	leakCheck(t)
	cfg := route0("127.0.0.1:0", mustAddr(t, "tcp://"+silentTarget(t)), func(r *Route) { r.DialTimeout = 30 * time.Second })
	cfg.Engine = EngineEvent
	s := startRelay(t, cfg)
	c := dialRoute(t, s, "r")
	defer c.Close()
	waitFor(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, ci := range testEng(s).inFlight() {
			return ci.dialing
		}
		return false
	})
	c.(*net.TCPConn).SetLinger(0)
	c.Close()
	waitFor(t, func() bool { st := s.Stats().Routes[0]; return st.Active == 0 && st.CopyErrors == 1 })
	if st := targetStats(s, 0); !st.Up || st.DialErrors != 0 {
		t.Errorf("target %+v; want up, no dial error", st)
	}
}

// TestGoodbyeBeforeReset: a target that answers a client with a last
// message and closes while the client still uploads (an error reply,
// SMTP's 421) resets at the client's next bytes; the client still gets
// the message before the relay closes it, as it would connected to the
// target directly.
func TestGoodbyeBeforeReset(t *testing.T) { forEachEngine(t, testGoodbyeBeforeReset) }

func testGoodbyeBeforeReset(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", func(c net.Conn) { io.WriteString(c, "bye\n") })
	s := startRelay(t, route0("127.0.0.1:0", b.addr, nil))
	for i := range 20 {
		c := dialRoute(t, s, "r")
		fill(c) // until the target's reset ends the relay
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if string(got) != "bye\n" {
			t.Fatalf("client %d got %q (%v), want the target's goodbye", i, got, err)
		}
	}
}
