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

// TestLeastConnCountsDials: least-conn counts a dial in progress as a
// connection of its target. A target slow to answer (here one that never
// does) would otherwise look empty while its dials hang, and take every
// new client meanwhile.
func TestLeastConnCountsDials(t *testing.T) { forEachEngine(t, testLeastConnCountsDials) }

func testLeastConnCountsDials(t *testing.T) {
	slow := mustAddr(t, "tcp://"+silentTarget(t))
	b := startBackend(t, "tcp4", echo)
	cfg := targetsRoute(func(r *Route) {
		r.Balance = LeastConn
		// A client that picks the slow target waits 1 s there, then
		// is given the live one.
		r.DialTimeout = 2 * time.Second
	}, slow, b.addr)
	s := startRelay(t, cfg)
	const n = 10
	for range n {
		c := dialRoute(t, s, "r")
		defer c.Close()
	}
	// Every client ends on the live target; those that picked the slow
	// one first left a dial error there.
	waitFor(t, func() bool { return s.Stats().Routes[0].Targets[1].Active == n })
	if st := s.Stats().Routes[0].Targets; st[0].DialErrors > n/2+1 {
		t.Errorf("%d of %d clients picked the target that does not answer while its dials hung", st[0].DialErrors, n)
	}
}
