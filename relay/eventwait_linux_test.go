package relay

import (
	"context"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestLoopsBringTheirOwnPs: busy event loops sleep in epoll_wait holding
// their P, so each engine raises GOMAXPROCS by its loops while it runs and
// gives them back when it stops, and the program keeps the Ps it had with
// any number of engines running; no loop holds one when GOMAXPROCS is
// lowered under it. A garbage collection, which must stop every loop,
// completes while the loops sleep and while they relay.
func TestLoopsBringTheirOwnPs(t *testing.T) {
	leakCheck(t)
	procs0 := runtime.GOMAXPROCS(0)
	b := startBackend(t, "tcp4", echo)
	start := func() *Server {
		cfg := route0("127.0.0.1:0", b.addr, nil)
		cfg.Engine = EngineEvent
		s := startRelay(t, cfg)
		c := dialRoute(t, s, "r") // the loops start with the first listener
		defer c.Close()
		if err := roundTrip(c, 100, 1); err != nil {
			t.Fatal(err)
		}
		return s
	}
	stop := func(s *Server) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s1 := start()
	if got, want := runtime.GOMAXPROCS(0), 2*procs0; got != want {
		t.Fatalf("GOMAXPROCS %d with one engine running, want %d (%d loops on top of %d)", got, want, procs0, procs0)
	}

	// A GOMAXPROCS lowered under the engine (testing.AllocsPerRun sets
	// 1) leaves no P to hold: the loops wait without one.
	mayHold := func(s *Server) (all, none bool) {
		all, none = true, true
		for _, lp := range s.eng.(*eventEngine).started() {
			lp.call(func() {
				if lp.p.CheckHold(lp.now) { // looking again now
					none = false
				} else {
					all = false
				}
			})
		}
		return all, none
	}
	if all, _ := mayHold(s1); !all {
		t.Errorf("a loop may not hold its P with GOMAXPROCS %d", runtime.GOMAXPROCS(0))
	}
	prev := runtime.GOMAXPROCS(1)
	_, none := mayHold(s1)
	runtime.GOMAXPROCS(prev)
	if !none {
		t.Errorf("a loop may hold its P with GOMAXPROCS 1")
	}

	s2 := start()
	if got, want := runtime.GOMAXPROCS(0), 3*procs0; got != want {
		t.Fatalf("GOMAXPROCS %d with two engines running, want %d", got, want)
	}

	// Collections while the loops of both engines sleep, then while
	// clients keep them busy.
	for range 10 {
		runtime.GC()
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	for i, s := range []*Server{s1, s2, s1, s2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 300; n++ {
				select {
				case <-done:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", s.Addrs("r")[0].String(), 5*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				err = roundTrip(c, 64+i, uint64(n))
				c.Close()
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range 20 {
		runtime.GC()
	}
	close(done)
	wg.Wait()

	stop(s2)
	if got := runtime.GOMAXPROCS(0); got != 2*procs0 {
		t.Errorf("GOMAXPROCS %d after one engine stopped, want %d", got, 2*procs0)
	}
	stop(s1)
	if got := runtime.GOMAXPROCS(0); got != procs0 {
		t.Errorf("GOMAXPROCS %d after every engine stopped, want the program's %d", got, procs0)
	}
}
