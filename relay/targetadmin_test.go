package relay

import (
	"net"
	"strings"
	"testing"
	"time"
)

// TestTargetAdmin drains, disables, enables and reweighs targets at run
// time: a drained target takes no new client while its connections go
// on, and a reload gives every target its configured state back.
func TestTargetAdmin(t *testing.T) { forEachEngine(t, testTargetAdmin) }

func testTargetAdmin(t *testing.T) {
	leakCheck(t)
	a, b := startBackend(t, "tcp4", echo), startBackend(t, "tcp4", echo)
	cfg := route0("127.0.0.1:0", Addr{}, func(r *Route) {
		r.Targets = []Target{{Addr: a.addr, Weight: 1}, {Addr: b.addr, Weight: 1}}
	})
	s := startRelay(t, cfg)
	conns := func(i int) uint64 { return s.Stats().Routes[0].Targets[i].Connections }
	clients := func(n int) {
		t.Helper()
		eachClient(t, s, "r", n, func(_ int, c net.Conn) {
			if err := ping(c); err != nil {
				t.Error(err)
			}
		})
	}
	// A client held on a: it goes on while a drains.
	var held net.Conn
	for held == nil {
		c := dialRoute(t, s, "r")
		if err := ping(c); err != nil {
			t.Fatal(err)
		}
		if s.Stats().Routes[0].Targets[0].Active == 1 {
			held = c
		} else {
			c.Close()
		}
	}
	defer held.Close()

	if _, err := s.SetTargetState("r", a.addr.Address, TargetDraining); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats().Routes[0].Targets[0]; st.State != TargetDraining || st.Active != 1 {
		t.Fatalf("drained target: state %v, %d active", st.State, st.Active)
	}
	before := conns(0)
	clients(8)
	if got := conns(0); got != before {
		t.Errorf("a drained target took %d new clients", got-before)
	}
	if err := ping(held); err != nil {
		t.Errorf("the drained target's connection: %v", err)
	}

	// Enabled again, with b at weight 0: a takes every client.
	if _, err := s.SetTargetState("r", a.addr.String(), TargetEnabled); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetTargetWeight("r", b.addr.Address, 0); err != nil {
		t.Fatal(err)
	}
	beforeB := conns(1)
	clients(6)
	if got := conns(1); got != beforeB {
		t.Errorf("a target set to weight 0 took %d new clients", got-beforeB)
	}

	// Disabled: no new client either.
	if _, err := s.SetTargetState("r", a.addr.Address, TargetDisabled); err != nil {
		t.Fatal(err)
	}
	s.SetTargetWeight("r", b.addr.Address, -1)
	before = conns(0)
	clients(4)
	if got := conns(0); got != before {
		t.Errorf("a disabled target took %d new clients", got-before)
	}

	// A reload gives the configured states and weights back.
	if err := s.Update(withEngine(t, route0(s.Addrs("r")[0].String(), Addr{}, func(r *Route) {
		r.Targets = []Target{{Addr: a.addr, Weight: 1}, {Addr: b.addr, Weight: 1}}
	}))); err != nil {
		t.Fatal(err)
	}
	for i, st := range s.Stats().Routes[0].Targets {
		if st.State != TargetEnabled || st.Weight != 1 {
			t.Errorf("target %d after a reload: %v, weight %d", i, st.State, st.Weight)
		}
	}

	for _, tc := range []struct{ route, target, want string }{
		{"nope", a.addr.Address, `no route "nope"`},
		{"r", "127.0.0.1:1", "no such target"},
	} {
		if _, err := s.SetTargetState(tc.route, tc.target, TargetDraining); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetTargetState(%q, %q): %v, want %q", tc.route, tc.target, err, tc.want)
		}
	}
}

// TestStreamsAndClose lists the streams in flight, page by page, and
// closes one by its ID.
func TestStreamsAndClose(t *testing.T) { forEachEngine(t, testStreamsAndClose) }

func testStreamsAndClose(t *testing.T) {
	leakCheck(t)
	b := startBackend(t, "tcp4", echo)
	s := startRelay(t, route0("127.0.0.1:0", b.addr, nil))
	var cs []net.Conn
	for range 5 {
		c := dialRoute(t, s, "r")
		defer c.Close()
		if err := ping(c); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	// A relay counts a chunk once written, and the echo may come back
	// first.
	var all []StreamInfo
	waitFor(t, func() bool {
		all = s.Streams(0, 0)
		for _, si := range all {
			if si.BytesUp != 4 || si.BytesDown != 4 {
				return false
			}
		}
		return len(all) == 5
	})
	for _, si := range all {
		if si.Route != "r" || si.Target != b.addr.String() || si.State != "relaying" || !si.Client.IsValid() || si.Age <= 0 {
			t.Errorf("stream %+v", si)
		}
	}
	page := s.Streams(0, 2)
	next := s.Streams(page[1].ID, 2)
	if len(page) != 2 || len(next) != 2 || page[0].ID != all[0].ID || next[0].ID != all[2].ID {
		t.Fatalf("pages %+v then %+v of %+v", page, next, all)
	}
	// The client whose stream is closed sees its end.
	victim := all[0]
	var vc net.Conn
	for _, c := range cs {
		if c.LocalAddr().String() == victim.Client.String() {
			vc = c
		}
	}
	if vc == nil {
		t.Fatalf("no client at %v", victim.Client)
	}
	if !s.CloseStream(victim.ID) {
		t.Fatal("CloseStream found no stream")
	}
	if !waitClosed(vc, 5*time.Second) {
		t.Error("the closed stream's client is still open")
	}
	waitFor(t, func() bool { return len(s.Streams(0, 0)) == 4 })
	if s.CloseStream(victim.ID) {
		t.Error("CloseStream closed a stream twice")
	}
}

// TestTargetAdminUDP drains a UDP target: new sessions go to the other
// while the drained one's session goes on.
func TestTargetAdminUDP(t *testing.T) {
	leakCheck(t)
	a, b := udpEcho(t, "udp4", "127.0.0.1:0"), udpEcho(t, "udp4", "127.0.0.1:0")
	ta := Addr{Network: "udp", Address: a.LocalAddr().String()}
	tb := Addr{Network: "udp", Address: b.LocalAddr().String()}
	s := startRelay(t, Config{Routes: []Route{{Name: "u", Listen: Addr{Network: "udp", Address: "127.0.0.1:0"},
		Targets: []Target{{Addr: ta, Weight: 1}, {Addr: tb, Weight: 1}}}}})
	ra := s.Addrs("u")[0].String()
	echoOnce := func(c net.Conn) {
		t.Helper()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
	}
	// A session on a, held through the drain.
	var held net.Conn
	for held == nil {
		c, err := net.Dial("udp4", ra)
		if err != nil {
			t.Fatal(err)
		}
		echoOnce(c)
		if s.Stats().Routes[0].Targets[0].Active == 1 {
			held = c
		} else {
			c.Close()
		}
	}
	defer held.Close()
	if _, err := s.SetTargetState("u", ta.String(), TargetDraining); err != nil {
		t.Fatal(err)
	}
	before := s.Stats().Routes[0].Targets[0].Connections
	for range 6 {
		c, err := net.Dial("udp4", ra)
		if err != nil {
			t.Fatal(err)
		}
		echoOnce(c)
		c.Close()
	}
	if got := s.Stats().Routes[0].Targets[0].Connections; got != before {
		t.Errorf("a drained UDP target took %d new sessions", got-before)
	}
	echoOnce(held) // its session goes on
}
