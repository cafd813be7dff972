package relay

import (
	"fmt"
	"testing"
)

// TestReloadNamesPortZerosPort: a route that listened on port 0 is given,
// by a reload, the port it got (as a program that pins what Addrs
// reported would): the reload opens its new sockets beside the old ones
// and the route goes on serving on that port.
func TestReloadNamesPortZerosPort(t *testing.T) { forEachEngine(t, testReloadNamesPortZerosPort) }

func testReloadNamesPortZerosPort(t *testing.T) {
	b := startBackend(t, "tcp4", echo)
	for _, workers := range [][2]int{{1, 1}, {1, 2}, {2, 1}} {
		t.Run(fmt.Sprintf("workers=%d-to-%d", workers[0], workers[1]), func(t *testing.T) {
			cfg := route0("127.0.0.1:0", b.addr, func(r *Route) { r.Workers = workers[0] })
			s := startRelay(t, cfg)
			addr := s.Addrs("r")[0].String()
			r := cfg.Routes[0]
			r.Listen.Address, r.Workers = addr, workers[1]
			if err := s.Update(Config{Routes: []Route{r}}); err != nil {
				t.Fatal(err)
			}
			if got := s.Addrs("r")[0].String(); got != addr {
				t.Fatalf("listening on %s after the reload, want %s", got, addr)
			}
			c := dialRoute(t, s, "r")
			defer c.Close()
			if err := ping(c); err != nil {
				t.Fatal(err)
			}
		})
	}
}
