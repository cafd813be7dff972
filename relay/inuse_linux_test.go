package relay

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

// A second Server asked to listen, with Workers > 1, on an address that
// another one serves is refused with an error naming the address, as a
// single listener is, rather than joining its SO_REUSEPORT group and
// taking a share of its clients; the first one goes on relaying.
func TestListenInUseByAnother(t *testing.T) { forEachEngine(t, testListenInUseByAnother) }

func testListenInUseByAnother(t *testing.T) {
	be := startBackend(t, "tcp4", echo)
	for _, tc := range []struct {
		name          string
		network       string
		target        func(t *testing.T) Addr
		first, second int // workers
	}{
		{"tcp/2-then-2", "tcp", func(*testing.T) Addr { return be.addr }, 2, 2},
		{"tcp/1-then-2", "tcp", func(*testing.T) Addr { return be.addr }, 1, 2},
		{"tcp/2-then-1", "tcp", func(*testing.T) Addr { return be.addr }, 2, 1},
		{"udp/2-then-2", "udp", startUDPEcho, 2, 2},
		{"udp/1-then-2", "udp", startUDPEcho, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			route := func(addr string, workers int) Config {
				return Config{Routes: []Route{{Name: "r", Listen: Addr{tc.network, addr}, Target: tc.target(t), Workers: workers}}}
			}
			first := startRelay(t, route("127.0.0.1:0", tc.first))
			addr := first.Addrs("r")[0].String()
			second, err := New(withEngine(t, route(addr, tc.second)))
			if err != nil {
				t.Fatal(err)
			}
			err = second.Start()
			if err == nil {
				second.Close()
				t.Fatalf("a second server started on %s, which the first serves", addr)
			}
			if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "address already in use") {
				t.Errorf("Start: %v; want an error naming %s and saying it is in use", err, addr)
			}
			if err := second.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if tc.network == "tcp" { // the first still relays
				c := dialRoute(t, first, "r")
				defer c.Close()
				if err := roundTrip(c, 1000, 1); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// A reload of one Server that takes its own address over (more workers
// joining the group, a route moving to the wildcard address of its port)
// is not refused as an address in use.
func TestListenTakeOverOwn(t *testing.T) { forEachEngine(t, testListenTakeOverOwn) }

func testListenTakeOverOwn(t *testing.T) {
	be := startBackend(t, "tcp4", echo)
	s := startRelay(t, Config{Routes: []Route{{Name: "r", Listen: mustAddr(t, "tcp://127.0.0.1:0"), Target: be.addr}}})
	addr := s.Addrs("r")[0].String()
	_, port, _ := strings.Cut(addr, ":")
	for _, r := range []Route{
		{Name: "r", Listen: Addr{"tcp", addr}, Target: be.addr, Workers: 2},
		{Name: "r", Listen: Addr{"tcp", addr}, Target: be.addr, Workers: 3},
		{Name: "r", Listen: Addr{"tcp", "0.0.0.0:" + port}, Target: be.addr, Workers: 2},
	} {
		if err := s.Update(Config{Routes: []Route{r}}); err != nil {
			t.Fatalf("Update to %s with %d workers: %v", r.Listen, r.Workers, err)
		}
		c := dialRoute(t, s, "r")
		err := roundTrip(c, 1000, 2)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}
