package relay

import (
	"context"
	"net"
	"runtime"
	"slices"
	"testing"
	"time"
)

// TestLoopsShareConnections: connections go to the least loaded of the
// event engine's loops, whichever loop accepted them, so that clients
// arriving one at a time, or all at once, spread over the loops rather
// than stay on the loop the kernel wakes first; and each loop's load falls
// back to zero as they close (Stats.Loops).
func TestLoopsShareConnections(t *testing.T) {
	leakCheck(t)
	const loops = 4
	prev := runtime.GOMAXPROCS(loops) // one loop per P at the engine's start
	defer runtime.GOMAXPROCS(prev)
	b := startBackend(t, "tcp4", echo)
	cfg := route0("127.0.0.1:0", b.addr, nil)
	cfg.Engine = EngineEvent
	s := startRelay(t, cfg)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()

	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	// loads returns each loop's connections once every client is served.
	loads := func(want int) []int {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			var got []int
			sum := 0
			for _, n := range s.Stats().Loops {
				got = append(got, int(n))
				sum += int(n)
			}
			if sum == want || time.Now().After(deadline) {
				if sum != want {
					t.Fatalf("loops hold %v connections, want %d in all", got, want)
				}
				return got
			}
			time.Sleep(time.Millisecond)
		}
	}
	spread := func(got []int) int { return slices.Max(got) - slices.Min(got) }

	// One at a time: each client has its reply before the next dials.
	for range 40 {
		c := dialRoute(t, s, "r")
		open = append(open, c)
		if err := ping(c); err != nil {
			t.Fatal(err)
		}
	}
	if got := loads(40); len(got) != loops || spread(got) > 2 {
		t.Fatalf("40 clients one at a time: loops hold %v, want %d loops within 2 of each other", got, loops)
	}

	// All at once. Loops that accept at the same moment may both choose
	// the same loop, so the bound is looser.
	burst := make([]net.Conn, 64)
	eachClientOpen(t, s, "r", burst)
	if got := loads(104); spread(got) > 8 {
		t.Fatalf("64 more clients at once: loops hold %v, want them within 8 of each other", got)
	}
	for _, c := range append(open, burst...) {
		c.Close()
	}
	open = nil
	loads(0)
}

// eachClientOpen dials len(cs) clients of route name at once, each
// exchanging a byte, and leaves them open in cs.
func eachClientOpen(t *testing.T, s *Server, name string, cs []net.Conn) {
	t.Helper()
	a := s.Addrs(name)[0]
	errs := make(chan error, len(cs))
	t.Cleanup(func() {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	})
	for i := range cs {
		go func() {
			c, err := net.DialTimeout(a.Network(), a.String(), 5*time.Second)
			if err == nil {
				cs[i] = c
				err = ping(c)
			}
			errs <- err
		}()
	}
	for range cs {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}
