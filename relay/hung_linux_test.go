package relay

import (
	"net"
	"testing"
	"time"
)

// TestAllTargetsHung: when every target leaves connects unanswered, each
// client is closed once the route's dial timeout is spent, with nothing
// relayed, rather than held until the kernel gives up on the SYNs; and
// each failure is counted.
func TestAllTargetsHung(t *testing.T) { forEachEngine(t, testAllTargetsHung) }

func testAllTargetsHung(t *testing.T) {
	leakCheck(t)
	h1 := mustAddr(t, "tcp://"+silentTarget(t))
	h2 := mustAddr(t, "tcp://"+silentTarget(t))
	s := startRelay(t, targetsRoute(func(r *Route) { r.DialTimeout = 400 * time.Millisecond }, h1, h2))
	const clients = 5
	eachClient(t, s, "r", clients, func(i int, c net.Conn) {
		c.Write([]byte("hello?"))
		c.SetReadDeadline(time.Now().Add(20 * time.Second)) // a hang guard
		n, err := c.Read(make([]byte, 16))
		if n != 0 || isTimeout(err) {
			t.Errorf("client %d: read %d bytes, %v; want closed after the dial timeout", i, n, err)
		}
	})
	waitFor(t, func() bool {
		st := s.Stats().Routes[0]
		return st.Active == 0 && st.DialErrors == clients
	})
	for i := range 2 {
		if st := targetStats(s, i); st.Up {
			t.Errorf("target %d still up after timed-out dials: %+v", i, st)
		}
	}
}
