package relay

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// queuedServer returns a started Server with routes a (listening on
// listen) and b, both to target, where route a is bound but not served:
// no accept loop runs, so the n clients it returns, connected to a, wait
// in a's accept queue. The caller closes the clients.
func queuedServer(t *testing.T, listen string, target Addr, n int) (*Server, []Route, []net.Conn) {
	t.Helper()
	routes := []Route{
		{Name: "a", Listen: mustAddr(t, listen), Target: target},
		{Name: "b", Listen: mustAddr(t, "tcp://127.0.0.1:0"), Target: target},
	}
	s, err := New(withEngine(t, Config{Routes: routes}))
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	rt := s.routes["a"]
	r := s.cfg.Routes[0]
	lns, err := listenStream(&r)
	if err == nil {
		f := newFront(s, frontKey(&r), lns)
		tb, _ := newRouteTable([]*route{rt})
		f.table.Store(tb)
		rt.front = f
		s.fronts[f.key] = f
	}
	s.started = true
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	a := lns[0].Addr()
	var clients []net.Conn
	for range n {
		c, err := net.Dial(a.Network(), a.String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	return s, routes, clients
}

// Connections waiting in a stream listener's accept queue when Update
// moves or removes its route are relayed under the old settings, not
// reset by the close.
func TestUpdateServesQueuedConns(t *testing.T) { forEachEngine(t, testUpdateServesQueuedConns) }

func testUpdateServesQueuedConns(t *testing.T) {
	for _, tc := range []struct {
		name   string
		listen func(t *testing.T) string
		change func(routes []Route) []Route
	}{
		{"tcp/move", tcpAny, func(rs []Route) []Route { rs[0].Listen = mustAddr(t, "tcp://127.0.0.2:0"); return rs }},
		{"tcp/remove", tcpAny, func(rs []Route) []Route { return rs[1:] }},
		{"unix/move", unixSock, func(rs []Route) []Route { rs[0].Listen.Address += ".new"; return rs }},
		{"unix/remove", unixSock, func(rs []Route) []Route { return rs[1:] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := startBackend(t, "tcp4", echo)
			s, routes, clients := queuedServer(t, tc.listen(t), be.addr, 5)
			defer func() { // the clients end their relays, then Shutdown waits for them
				for _, c := range clients {
					c.Close()
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := s.Shutdown(ctx); err != nil {
					t.Errorf("Shutdown: %v", err)
				}
			}()
			if err := s.Update(Config{Routes: tc.change(routes)}); err != nil {
				t.Fatal(err)
			}
			for i, c := range clients {
				msg := fmt.Sprintf("client %d", i)
				c.SetDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, len(msg))
				if _, err := c.Write([]byte(msg)); err != nil {
					t.Fatalf("client %d: write: %v", i, err)
				}
				if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
					t.Fatalf("client %d: read %q, %v; want its echo", i, buf, err)
				}
			}
			for _, st := range s.Stats().Routes { // a rebound route keeps its counters
				if st.Name == "a" && st.Accepted != uint64(len(clients)) {
					t.Errorf("route a counted %d accepted, want %d", st.Accepted, len(clients))
				}
			}
		})
	}
}

func tcpAny(*testing.T) string { return "tcp://127.0.0.1:0" }

func unixSock(t *testing.T) string { return "unix://" + filepath.Join(shortTempDir(t), "a.sock") }

// A reload that hands queued connections over while Close runs: Close
// waits for the hand-over as it waits for accept loops, Update ends with
// nil or ErrServerClosed, and no goroutine or descriptor is left behind.
func TestUpdateQueuedDuringShutdown(t *testing.T) { forEachEngine(t, testUpdateQueuedDuringShutdown) }

func testUpdateQueuedDuringShutdown(t *testing.T) {
	be := startBackend(t, "tcp4", echo)
	leakCheck(t)
	for range 20 {
		s, routes, clients := queuedServer(t, "tcp://127.0.0.1:0", be.addr, 20)
		updated := make(chan error, 1)
		go func() { updated <- s.Update(Config{Routes: routes[1:]}) }()
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := <-updated; err != nil && err != ErrServerClosed {
			t.Fatalf("Update: %v", err)
		}
		for _, c := range clients {
			c.Close()
		}
	}
}

// Clients waiting in a stream listener's accept queue when Shutdown
// begins (here, a route bound but not yet served) are relayed before it
// returns, not reset by the listener's close.
func TestShutdownServesQueuedConns(t *testing.T) { forEachEngine(t, testShutdownServesQueuedConns) }

func testShutdownServesQueuedConns(t *testing.T) {
	for _, tc := range []struct {
		name   string
		listen func(t *testing.T) string
	}{{"tcp", tcpAny}, {"unix", unixSock}} {
		t.Run(tc.name, func(t *testing.T) {
			be := startBackend(t, "tcp4", echo)
			leakCheck(t)
			s, _, clients := queuedServer(t, tc.listen(t), be.addr, 20)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			shut := make(chan error, 1)
			go func() { shut <- s.Shutdown(ctx) }()
			for i, c := range clients {
				msg := fmt.Sprintf("client %d", i)
				c.SetDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, len(msg))
				if _, err := c.Write([]byte(msg)); err != nil {
					t.Errorf("client %d: write: %v", i, err)
				} else if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
					t.Errorf("client %d: read %q, %v; want its echo", i, buf, err)
				}
				c.Close()
			}
			if err := <-shut; err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			if st := s.Stats().Routes[0]; st.Accepted != uint64(len(clients)) {
				t.Errorf("route a counted %d accepted, want %d", st.Accepted, len(clients))
			}
		})
	}
}
