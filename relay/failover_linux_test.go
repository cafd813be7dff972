package relay

import (
	"testing"
	"time"
)

// TestFailoverHungTarget: a target that never answers a connect (its
// accept queue full, so SYNs go unanswered) holds a client at most its
// share of the dial timeout, then the client is given the live target;
// later clients skip the hung one while it is marked down.
func TestFailoverHungTarget(t *testing.T) { forEachEngine(t, testFailoverHungTarget) }

func testFailoverHungTarget(t *testing.T) {
	leakCheck(t)
	live := startBackend(t, "tcp4", echo)
	hung := mustAddr(t, "tcp://"+silentTarget(t))
	s := startRelay(t, targetsRoute(func(r *Route) { r.DialTimeout = 2 * time.Second }, hung, live.addr))
	for i := range 6 {
		c := dialRoute(t, s, "r")
		if err := roundTrip(c, 100, uint64(i)); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		c.Close()
	}
	if st := targetStats(s, 0); st.Up || st.DialErrors != 1 {
		t.Fatalf("hung target: %+v; want down after one timed-out dial", st)
	}
	if st := s.Stats().Routes[0]; st.DialErrors != 0 {
		t.Fatalf("%d clients failed", st.DialErrors)
	}
}
