package relay

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A Unix socket path too long for a socket address, as a target or to
// listen on, is refused by New and Update with one line naming it, and a
// refused Update keeps the running configuration.
func TestUnixPathTooLong(t *testing.T) { forEachEngine(t, testUnixPathTooLong) }

func testUnixPathTooLong(t *testing.T) {
	be := startBackend(t, "tcp4", echo)
	dir := shortTempDir(t)
	most := len(syscall.RawSockaddrUnix{}.Path) - 1
	long := filepath.Join(dir, strings.Repeat("x", most)) + ".sock"
	fits := filepath.Join(dir, strings.Repeat("y", most-len(dir)-1))
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"target", route0("127.0.0.1:0", Addr{"unix", long}, nil)},
		{"one target of two", route0("127.0.0.1:0", Addr{}, func(r *Route) {
			r.Targets = []Target{{Addr: be.addr, Weight: 1}, {Addr: Addr{"unix", long}, Weight: 1}}
		})},
		{"listen", route0(long, be.addr, nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(withEngine(t, tc.cfg))
			if err == nil || !strings.Contains(err.Error(), long) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("New: %v; want one line naming the path", err)
			}
			s := startRelay(t, route0("127.0.0.1:0", be.addr, nil))
			err = s.Update(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), long) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Update: %v; want one line naming the path", err)
			}
			c := dialRoute(t, s, "r") // the running route still relays
			defer c.Close()
			if err := roundTrip(c, 100, 1); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("longest that fits", func(t *testing.T) {
		tb := startBackend(t, "tcp4", echo)
		s := startRelay(t, route0(fits, tb.addr, nil))
		c := dialRoute(t, s, "r")
		defer c.Close()
		if err := roundTrip(c, 100, 2); err != nil {
			t.Fatal(err)
		}
	})
}
