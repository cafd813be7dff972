package relay

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/proxyproto"
)

// deadAddr returns a loopback TCP address nobody listens on: a dial gets
// ECONNREFUSED.
func deadAddr(t testing.TB) Addr {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return Addr{"tcp", a}
}

// targetsRoute is a one-route config over targets, weight 1 each.
func targetsRoute(mod func(*Route), targets ...Addr) Config {
	r := Route{Name: "r", Listen: Addr{"tcp", "127.0.0.1:0"}}
	for _, a := range targets {
		r.Targets = append(r.Targets, Target{Addr: a, Weight: 1})
	}
	if mod != nil {
		mod(&r)
	}
	return Config{Routes: []Route{r}}
}

func targetStats(s *Server, i int) TargetStats { return s.Stats().Routes[0].Targets[i] }

// TestFailoverDeadTarget: with one of three targets down, every client is
// served, by the two live ones, for every policy.
func TestFailoverDeadTarget(t *testing.T) { forEachEngine(t, testFailoverDeadTarget) }

func testFailoverDeadTarget(t *testing.T) {
	for _, policy := range []Balance{RoundRobin, LeastConn, ClientHash} {
		t.Run(string(policy), func(t *testing.T) {
			leakCheck(t)
			a, b := startBackend(t, "tcp4", echo), startBackend(t, "tcp4", echo)
			s := startRelay(t, targetsRoute(func(r *Route) { r.Balance = policy }, deadAddr(t), a.addr, b.addr))
			for i := range 30 {
				c := dialRoute(t, s, "r")
				if err := roundTrip(c, 1000, uint64(i)); err != nil {
					t.Fatalf("client %d: %v", i, err)
				}
				c.Close()
			}
			waitFor(t, func() bool { return s.Stats().Routes[0].Active == 0 })
			st := s.Stats().Routes[0]
			// One client address hashes to one target: the dead one
			// may never be tried.
			if policy != ClientHash && (st.Targets[0].Up || st.Targets[0].DialErrors == 0) || st.Targets[0].Connections != 0 {
				t.Errorf("dead target: %+v", st.Targets[0])
			}
			if policy != ClientHash && (st.Targets[1].Connections == 0 || st.Targets[2].Connections == 0) {
				t.Errorf("connections not spread over the live targets: %+v", st.Targets)
			}
			if st.Targets[1].Connections+st.Targets[2].Connections != 30 || st.DialErrors != 0 {
				t.Errorf("stats %+v: want 30 connections relayed, no client failed", st)
			}
			if st.Targets[1].BytesUp+st.Targets[2].BytesUp != 30*1000 {
				t.Errorf("per-target bytes up %d, want %d", st.Targets[1].BytesUp+st.Targets[2].BytesUp, 30*1000)
			}
		})
	}
}

// TestFailoverKilledTarget: a target killed while clients come and go;
// every client after it and before it is served, and when it comes back
// (the same port) it takes clients again.
func TestFailoverKilledTarget(t *testing.T) { forEachEngine(t, testFailoverKilledTarget) }

func testFailoverKilledTarget(t *testing.T) {
	leakCheck(t)
	a := startBackend(t, "tcp4", echo)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	baddr := Addr{"tcp", ln.Addr().String()}
	serve := func(ln net.Listener) *sync.WaitGroup {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				wg.Add(1)
				go func() { defer wg.Done(); defer c.Close(); echo(c) }()
			}
		}()
		return &wg
	}
	wg := serve(ln)
	s := startRelay(t, targetsRoute(nil, a.addr, baddr))
	run := func(n int) {
		for i := range n {
			c := dialRoute(t, s, "r")
			if err := roundTrip(c, 100, uint64(i)); err != nil {
				t.Fatalf("client %d: %v", i, err)
			}
			c.Close()
		}
	}
	run(10)
	ln.Close()
	wg.Wait()
	run(20)
	if st := targetStats(s, 1); st.Up {
		t.Fatalf("killed target still up: %+v", st)
	}
	// Back on the same port: after its backoff, a client tries it again.
	ln, err = net.Listen("tcp4", baddr.Address)
	if err != nil {
		t.Skipf("port taken meanwhile: %v", err)
	}
	defer ln.Close()
	wg = serve(ln)
	before := targetStats(s, 1).Connections
	waitFor(t, func() bool {
		run(2)
		return targetStats(s, 1).Connections > before
	})
	if !targetStats(s, 1).Up {
		t.Fatal("target back but not up")
	}
	ln.Close()
	waitFor(t, func() bool { return s.Stats().Routes[0].Active == 0 })
	wg.Wait()
}

// TestActiveHealthChecks: checks mark a dead target down without any
// client trying it, and bring it back once it answers Rise times.
func TestActiveHealthChecks(t *testing.T) { forEachEngine(t, testActiveHealthChecks) }

func testActiveHealthChecks(t *testing.T) {
	leakCheck(t)
	a := startBackend(t, "tcp4", echo)
	dead := deadAddr(t)
	s := startRelay(t, targetsRoute(func(r *Route) {
		r.HealthCheck = HealthCheck{Interval: 20 * time.Millisecond, Rise: 2, Fall: 2}
	}, a.addr, dead))
	waitFor(t, func() bool { return !targetStats(s, 1).Up })
	if targetStats(s, 1).DialErrors != 0 {
		t.Fatal("a check's failure counted as a client's dial error")
	}
	for i := range 10 {
		c := dialRoute(t, s, "r")
		if err := roundTrip(c, 10, uint64(i)); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	if st := targetStats(s, 1); st.Connections != 0 || st.DialErrors != 0 {
		t.Fatalf("a client was sent to the target the checks marked down: %+v", st)
	}
	ln, err := net.Listen("tcp4", dead.Address)
	if err != nil {
		t.Skipf("port taken meanwhile: %v", err)
	}
	defer ln.Close()
	waitFor(t, func() bool { return targetStats(s, 1).Up })
}

// TestChecksAloneBringUp: with active checks, a target they marked down
// stays down when a client's dial to it connects (the last resort, or a
// connect that completed just before another client's failed dial marked
// it down) until Rise checks pass, as documented and as HAProxy does.
func TestChecksAloneBringUp(t *testing.T) { forEachEngine(t, testChecksAloneBringUp) }

func testChecksAloneBringUp(t *testing.T) {
	leakCheck(t)
	dead := deadAddr(t)
	// The first check runs at once and fails; the next is an hour away.
	s := startRelay(t, targetsRoute(func(r *Route) {
		r.HealthCheck = HealthCheck{Interval: time.Hour, Fall: 1}
	}, dead))
	waitFor(t, func() bool { return !targetStats(s, 0).Up })
	ln, err := net.Listen("tcp4", dead.Address)
	if err != nil {
		t.Skipf("port taken meanwhile: %v", err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			echo(c)
			c.Close()
		}
	}()
	c := dialRoute(t, s, "r") // every target down: tried as the last resort
	if err := ping(c); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if targetStats(s, 0).Up {
		t.Fatal("a client's dial brought up a target the checks marked down, before Rise checks passed")
	}
}

// TestBackoffPerEpisode: the clients whose dials to a target fail at
// once, when it dies under load, mark it down for the first backoff, not
// one doubling each: the backoff doubles with each retry that fails after
// a mark expired, so that a target back a second later is used again a
// second later, not after the longest backoff.
func TestBackoffPerEpisode(t *testing.T) { forEachEngine(t, testBackoffPerEpisode) }

func testBackoffPerEpisode(t *testing.T) {
	leakCheck(t)
	a := startBackend(t, "tcp4", echo)
	dead := deadAddr(t)
	s := startRelay(t, targetsRoute(nil, a.addr, dead))
	s.mu.Lock()
	b := s.routes["r"].targets().bs[1]
	s.mu.Unlock()
	for range 5 {
		eachClient(t, s, "r", 32, func(i int, c net.Conn) {
			if err := ping(c); err != nil {
				t.Error(err)
			}
		})
		if targetStats(s, 1).DialErrors > 1 {
			break
		}
		// Only one failed: start again from a target that is up.
		b.failStreak.Store(0)
		b.downUntil.Store(0)
	}
	if n := targetStats(s, 1).DialErrors; n < 2 {
		t.Skipf("%d dial failed: no failures at once to look at", n)
	}
	if left := time.Until(time.Unix(0, b.downUntil.Load())); left > minBackoff {
		t.Fatalf("after %d dials failed at once, down for %v more, want at most %v", targetStats(s, 1).DialErrors, left, minBackoff)
	}
}

// TestReloadTargets: a reload adds, removes and reweights targets; a
// connection to a removed target goes on undisturbed, and a kept
// target's health and counters survive.
func TestReloadTargets(t *testing.T) { forEachEngine(t, testReloadTargets) }

func testReloadTargets(t *testing.T) {
	leakCheck(t)
	a, b, c := startBackend(t, "tcp4", echo), startBackend(t, "tcp4", echo), startBackend(t, "tcp4", echo)
	dead := deadAddr(t)
	cfg := targetsRoute(nil, a.addr, dead)
	s := startRelay(t, cfg)
	held := dialRoute(t, s, "r") // to a: the dead one is never reached
	defer held.Close()
	if err := ping(held); err != nil {
		t.Fatal(err)
	}
	c2 := dialRoute(t, s, "r")
	ping(c2)
	c2.Close()
	if targetStats(s, 1).Up {
		t.Fatal("dead target up")
	}
	// Remove a, keep dead (still down), add b and c weighted 3 to 1.
	r := cfg.Routes[0]
	r.Targets = []Target{{Addr: dead, Weight: 0}, {Addr: b.addr, Weight: 3}, {Addr: c.addr, Weight: 1}}
	if err := s.Update(Config{Routes: []Route{r}}); err != nil {
		t.Fatal(err)
	}
	if st := targetStats(s, 0); st.Up || st.DialErrors == 0 {
		t.Fatalf("kept target lost its state: %+v", st)
	}
	if err := ping(held); err != nil {
		t.Fatalf("connection to a removed target disturbed: %v", err)
	}
	for range 8 {
		cc := dialRoute(t, s, "r")
		if err := ping(cc); err != nil {
			t.Fatal(err)
		}
		cc.Close()
	}
	waitFor(t, func() bool { return s.Stats().Routes[0].Active == 1 })
	if nb, nc := targetStats(s, 1).Connections, targetStats(s, 2).Connections; nb != 6 || nc != 2 {
		t.Fatalf("after reweighting 3:1, %d and %d connections", nb, nc)
	}
}

// TestConnLog: one line per finished connection, with why it ended.
func TestConnLog(t *testing.T) { forEachEngine(t, testConnLog) }

func testConnLog(t *testing.T) {
	a := startBackend(t, "tcp4", func(c net.Conn) { c.Write([]byte("bye")) })
	var buf syncBuffer
	cfg := targetsRoute(nil, a.addr)
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	cfg.ConnLog = slog.LevelInfo
	s := startRelay(t, cfg)
	c := dialRoute(t, s, "r")
	waitClosed(c, 5*time.Second)
	c.Close()
	waitFor(t, func() bool { return strings.Contains(buf.String(), "msg=connection") })
	line := buf.String()
	for _, want := range []string{"route=r", "target=" + a.addr.String(), "bytes_up=0", "bytes_down=3", `end="target closed"`, "client=127.0.0.1:"} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q lacks %s", line, want)
		}
	}
}

// TestConnLogOff: ConnLogOff logs no line per connection, though a handler
// enables every level from its minimum up, at start and after an Update
// that sets it.
func TestConnLogOff(t *testing.T) { forEachEngine(t, testConnLogOff) }

func testConnLogOff(t *testing.T) {
	a := startBackend(t, "tcp4", func(c net.Conn) { c.Write([]byte("bye")) })
	var buf syncBuffer
	cfg := targetsRoute(nil, a.addr)
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	cfg.ConnLog = ConnLogOff
	s := startRelay(t, cfg)
	relayOnce := func() {
		t.Helper()
		c := dialRoute(t, s, "r")
		waitClosed(c, 5*time.Second)
		c.Close()
		waitFor(t, func() bool { return s.Stats().Routes[0].Relayed > 0 && s.Stats().Routes[0].Active == 0 })
	}
	relayOnce()
	cfg.ConnLog = slog.LevelInfo
	if err := s.Update(cfg); err != nil {
		t.Fatal(err)
	}
	cfg.ConnLog = ConnLogOff
	if err := s.Update(cfg); err != nil {
		t.Fatal(err)
	}
	relayOnce()
	if strings.Contains(buf.String(), "msg=connection") {
		t.Fatalf("ConnLogOff logged a connection:\n%s", buf.String())
	}
}

// TestBadRoutes: each bad value is refused by New with an error naming it.
func TestBadRoutes(t *testing.T) {
	tcp := Addr{"tcp", "127.0.0.1:9"}
	for _, tc := range []struct {
		name string
		mod  func(*Route)
		want string
	}{
		{"no targets", func(r *Route) { r.Target = Addr{} }, "no target"},
		{"all weights 0", func(r *Route) {
			r.Target, r.Targets = Addr{}, []Target{{Addr: tcp, Weight: 0}, {Addr: Addr{"tcp", "127.0.0.1:10"}, Weight: 0}}
		}, "weight 0"},
		{"weight too big", func(r *Route) { r.Target, r.Targets = Addr{}, []Target{{Addr: tcp, Weight: 257}} }, "weight 257"},
		{"mixed", func(r *Route) {
			r.Target, r.Targets = Addr{}, []Target{{Addr: tcp, Weight: 1}, {Addr: Addr{"udp", "127.0.0.1:9"}, Weight: 1}}
		}, "UDP relays only to UDP"},
		{"duplicate", func(r *Route) { r.Target, r.Targets = Addr{}, []Target{{Addr: tcp, Weight: 1}, {Addr: tcp, Weight: 2}} }, "twice"},
		{"both", func(r *Route) { r.Targets = []Target{{Addr: Addr{"tcp", "127.0.0.1:10"}, Weight: 1}} }, "not both"},
		{"policy", func(r *Route) { r.Balance = "random" }, `balance "random"`},
		{"negative dial", func(r *Route) { r.DialTimeout = -time.Second }, "dial timeout -1s is negative"},
		{"negative idle", func(r *Route) { r.IdleTimeout = -time.Second }, "idle timeout -1s is negative"},
		{"negative proxy header", func(r *Route) { r.ProxyHeaderTimeout = -1 }, "PROXY header timeout"},
		{"negative session", func(r *Route) {
			r.Listen, r.Target = Addr{"udp", "127.0.0.1:7000"}, Addr{"udp", "127.0.0.1:7001"}
			r.SessionTimeout = -1
		}, "session timeout"},
		{"negative keepalive", func(r *Route) { r.KeepAlive = -1 }, "keep-alive"},
		{"never session", func(r *Route) {
			r.Listen, r.Target = Addr{"udp", "127.0.0.1:7000"}, Addr{"udp", "127.0.0.1:7001"}
			r.SessionTimeout = Never
		}, "cannot be never"},
		{"session on tcp", func(r *Route) { r.SessionTimeout, r.MaxSessions = time.Second, 5 }, "session_timeout, max_sessions: for UDP routes only"},
		{"limits on udp", func(r *Route) {
			r.Listen, r.Target = Addr{"udp", "127.0.0.1:7000"}, Addr{"udp", "127.0.0.1:7001"}
			r.MaxConns, r.IdleTimeout = 5, time.Second
		}, "max_conns, idle_timeout: for stream (TCP or Unix) routes only"},
		{"trusted without accept", func(r *Route) { r.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} }, "accept_proxy"},
		{"check on nothing", func(r *Route) { r.HealthCheck.Rise = 2 }, "need an interval"},
		{"negative check", func(r *Route) { r.HealthCheck.Interval = -1 }, "negative health check"},
		{"self", func(r *Route) { r.Target = r.Listen }, "relay to itself"},
		{"self wildcard", func(r *Route) { r.Listen, r.Target = Addr{"tcp", "0.0.0.0:7000"}, Addr{"tcp", "127.0.0.1:7000"} }, "relay to itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Route{Name: "r", Listen: Addr{"tcp", "127.0.0.1:7000"}, Target: tcp}
			tc.mod(&r)
			_, err := New(Config{Routes: []Route{r}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q is not one line", err)
			}
		})
	}
	// One route's target the other's listen address.
	_, err := New(Config{Routes: []Route{
		{Name: "a", Listen: Addr{"tcp", "127.0.0.1:7000"}, Target: Addr{"tcp", "127.0.0.1:7001"}},
		{Name: "b", Listen: Addr{"tcp", "127.0.0.1:7001"}, Target: tcp},
	}})
	if err == nil || !strings.Contains(err.Error(), `listen address of route "b"`) {
		t.Fatalf("error %v", err)
	}
}

// TestSelfDialDetected: a target that names the relay's own listener in a
// way the config cannot see (localhost for 127.0.0.1) is caught when
// dialled: the client is closed, no loop runs.
func TestSelfDialDetected(t *testing.T) { forEachEngine(t, testSelfDialDetected) }

func testSelfDialDetected(t *testing.T) {
	leakCheck(t)
	port := deadAddr(t).Address[len("127.0.0.1:"):]
	cfg := targetsRoute(nil, Addr{"tcp", "localhost:" + port})
	cfg.Routes[0].Listen = Addr{"tcp4", "127.0.0.1:" + port}
	s, err := New(withEngine(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Skipf("port %s taken meanwhile: %v", port, err)
	}
	defer s.Close()
	for range 3 {
		c := dialRoute(t, s, "r")
		if !waitClosed(c, 5*time.Second) {
			t.Fatal("client of a looping route not closed")
		}
		c.Close()
	}
	waitFor(t, func() bool { return s.Stats().Routes[0].Active == 0 })
	// Each client costs at most one extra connection (the dial that
	// reached the relay), not a chain.
	if n := s.Stats().Routes[0].Accepted; n > 10 {
		t.Fatalf("%d connections accepted for 3 clients: the relay looped", n)
	}
}

// syncBuffer is a bytes.Buffer for a logger written from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestHealthChecksStop: active checks run only while configured, and
// stop when a reload turns them off or removes the route, not only at
// shutdown.
func TestHealthChecksStop(t *testing.T) {
	a := startBackend(t, "tcp4", echo)
	cfg := targetsRoute(nil, a.addr)
	s := startRelay(t, cfg)
	checkers := func() int {
		buf := make([]byte, 1<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "relay.(*targetSet).checkLoop")
	}
	if n := checkers(); n != 0 {
		t.Fatalf("%d checkers without health checks", n)
	}
	checked := cfg
	checked.Routes = []Route{cfg.Routes[0]}
	checked.Routes[0].HealthCheck = HealthCheck{Interval: 10 * time.Millisecond}
	if err := s.Update(checked); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return checkers() == 1 })
	if err := s.Update(cfg); err != nil { // checks off
		t.Fatal(err)
	}
	waitFor(t, func() bool { return checkers() == 0 })
	if err := s.Update(checked); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return checkers() == 1 })
	other := targetsRoute(nil, a.addr)
	other.Routes[0].Name = "other"
	if err := s.Update(other); err != nil { // route removed
		t.Fatal(err)
	}
	waitFor(t, func() bool { return checkers() == 0 })
}

// TestTimeoutsOfCenturies: timeouts just short of Never, the longest a
// duration can be, are as good as never: they do not wrap around to the
// past and fire at once, for the dial, the PROXY header or idleness.
func TestTimeoutsOfCenturies(t *testing.T) { forEachEngine(t, testTimeoutsOfCenturies) }

func testTimeoutsOfCenturies(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", echo)
	long := Never - 1
	s := startRelay(t, route0("127.0.0.1:0", b.addr, func(r *Route) {
		r.DialTimeout, r.IdleTimeout, r.ProxyHeaderTimeout, r.AcceptProxy = long, long, long, true
	}))
	c := dialRoute(t, s, "r")
	defer c.Close()
	if _, err := c.Write([]byte("PROXY TCP4 192.0.2.1 192.0.2.2 1000 80\r\n")); err != nil {
		t.Fatal(err)
	}
	pastNextTick(t, s)
	if err := ping(c); err != nil {
		t.Fatal(err)
	}
	pastNextTick(t, s)
	if err := ping(c); err != nil {
		t.Fatalf("after a pause: %v", err)
	}
}

// TestTimeoutDefaults: 0 takes the documented default, Never turns the
// dial and idle timeouts off.
func TestTimeoutDefaults(t *testing.T) {
	for _, tc := range []struct {
		dial, idle         time.Duration
		wantDial, wantIdle time.Duration
	}{
		{0, 0, DefaultDialTimeout, DefaultIdleTimeout},
		{Never, Never, 0, 0}, // 0 inside: no timeout
		{time.Second, time.Minute, time.Second, time.Minute},
	} {
		r := Route{Name: "r", Listen: Addr{"tcp", "127.0.0.1:0"}, Target: Addr{"tcp", "127.0.0.1:9"}, DialTimeout: tc.dial, IdleTimeout: tc.idle}
		s, err := New(Config{Routes: []Route{r}})
		if err != nil {
			t.Fatal(err)
		}
		got := s.routes["r"].cfg.Load()
		if got.DialTimeout != tc.wantDial || got.IdleTimeout != tc.wantIdle {
			t.Errorf("dial %v idle %v: in force %v and %v, want %v and %v", tc.dial, tc.idle, got.DialTimeout, got.IdleTimeout, tc.wantDial, tc.wantIdle)
		}
	}
}

// TestMixedStreamTargets: a stream route may mix TCP and Unix targets.
func TestMixedStreamTargets(t *testing.T) { forEachEngine(t, testMixedStreamTargets) }

func testMixedStreamTargets(t *testing.T) {
	leakCheck(t)
	tb, ub := startBackend(t, "tcp4", echo), startBackend(t, "unix", echo)
	s := startRelay(t, targetsRoute(nil, tb.addr, ub.addr))
	for i := range 6 {
		c := dialRoute(t, s, "r")
		if err := roundTrip(c, 1000, uint64(i)); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	waitFor(t, func() bool { return s.Stats().Routes[0].Active == 0 })
	if a, b := targetStats(s, 0).Connections, targetStats(s, 1).Connections; a != 3 || b != 3 {
		t.Fatalf("TCP target %d connections, Unix target %d; want 3 each", a, b)
	}
}

// TestConnLogClientReset: a client that resets before the relay reads
// it still gets its line, ended by a reset, and counts as a copy error,
// though the event engine dials no target for it.
func TestConnLogClientReset(t *testing.T) { forEachEngine(t, testConnLogClientReset) }

func testConnLogClientReset(t *testing.T) {
	a := startBackend(t, "tcp4", echo)
	var buf syncBuffer
	cfg := targetsRoute(nil, a.addr)
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	cfg.ConnLog = slog.LevelInfo
	cfg.MaxConns = 1
	s := startRelay(t, cfg)
	// The first client holds the only slot, so that the second resets
	// while it waits in the listen backlog.
	first := dialRoute(t, s, "r")
	defer first.Close()
	if err := ping(first); err != nil {
		t.Fatal(err)
	}
	c := dialRoute(t, s, "r")
	c.(*net.TCPConn).SetLinger(0)
	c.Close()
	first.Close()
	waitFor(t, func() bool { return strings.Contains(buf.String(), "end=reset") })
	waitFor(t, func() bool { return s.Stats().Routes[0].Active == 0 })
	if n := s.Stats().Routes[0].CopyErrors; n != 1 {
		t.Errorf("%d copy errors, want 1", n)
	}
}

// TestHealthCheckSendsProxy: on a route that sends the PROXY protocol,
// each check writes a header too, one that names no client (v1 UNKNOWN,
// v2 LOCAL), so that a target requiring the header accepts the check.
func TestHealthCheckSendsProxy(t *testing.T) {
	for _, v := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			leakCheck(t)
			got := make(chan []byte, 16)
			b := startBackend(t, "tcp4", func(c net.Conn) {
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				all, _ := io.ReadAll(c)
				select {
				case got <- all:
				default:
				}
			})
			startRelay(t, targetsRoute(func(r *Route) {
				r.SendProxy = v
				r.HealthCheck = HealthCheck{Interval: time.Hour}
			}, b.addr))
			var all []byte
			select {
			case all = <-got:
			case <-time.After(5 * time.Second):
				t.Fatal("no check reached the target")
			}
			h, n, err := proxyproto.Parse(all)
			if err != nil || n != len(all) || h.Version != v || h.Source.IsValid() {
				t.Fatalf("check sent %q: %+v, %v; want a v%d header naming no client, alone", all, h, err, v)
			}
			if v == 2 && h.Command != proxyproto.Local {
				t.Fatalf("check sent command %v, want LOCAL", h.Command)
			}
		})
	}
}

// TestTargetResetsAtOnce: a target that takes each connection and resets
// it at once fails the relay's first write to it (the PROXY header) as
// often as not. Every such connection must still end in the target's
// counters, its active count back to 0, and have its line in the
// connection log, as one the reset ends later does.
func TestTargetResetsAtOnce(t *testing.T) { forEachEngine(t, testTargetResetsAtOnce) }

func testTargetResetsAtOnce(t *testing.T) {
	// Reset in the accept loop: a goroutine per connection would be too
	// late to beat the header.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	var buf syncBuffer
	cfg := targetsRoute(func(r *Route) { r.SendProxy = 1 }, Addr{"tcp", ln.Addr().String()})
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	cfg.ConnLog = slog.LevelInfo
	s := startRelay(t, cfg)
	// Many at once, so that the relay is slower to write than the
	// target to reset.
	const n = 400
	eachClient(t, s, "r", n, func(_ int, c net.Conn) {
		c.Write([]byte("x"))
		waitClosed(c, 5*time.Second)
	})
	waitFor(t, func() bool { r := s.Stats().Routes[0]; return r.Active == 0 && r.Accepted == n })
	waitFor(t, func() bool { return strings.Count(buf.String(), "msg=connection") == n })
	r := s.Stats().Routes[0]
	if ts := r.Targets[0]; ts.Active != 0 {
		t.Errorf("target active %d after every connection ended (%d relayed)", ts.Active, r.Relayed)
	}
}
