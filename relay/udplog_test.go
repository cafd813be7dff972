package relay

import (
	"log/slog"
	"net"
	"strings"
	"testing"
)

// TestUDPSocketFailuresLogByEpisode: when a session's socket will not
// open (at the descriptor limit, EMFILE, every datagram of every new
// client fails so), the failures are counted each but logged as other
// floods are: the first in full, then a count every 30 s, not a line per
// datagram. A target link-local address without a zone stands in for
// the limit here: connect(2) refuses it (EINVAL) every time.
func TestUDPSocketFailuresLogByEpisode(t *testing.T) {
	leakCheck(t)
	if c, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback}); err != nil {
		t.Skipf("no IPv6: %v", err)
	} else {
		c.Close()
	}
	var buf syncBuffer
	s := startRelay(t, Config{
		Logger: slog.New(slog.NewTextHandler(&buf, nil)),
		Routes: []Route{{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"}, Target: Addr{"udp", "[fe80::1]:53"}}},
	})
	const n = 20
	for range n {
		if _, err := dialUDP(t, s.Addrs("u")[0].(*net.UDPAddr)).Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return s.Stats().Routes[0].DialErrors == n })
	if st := s.Stats().Routes[0]; st.DropsWriteError != n || st.SessionsTotal != 0 {
		t.Errorf("Stats: %d dropped, %d sessions; want %d, 0", st.DropsWriteError, st.SessionsTotal, n)
	}
	if got := strings.Count(buf.String(), "UDP upstream socket failed"); got != 1 {
		t.Errorf("%d lines for %d failed session sockets, want 1:\n%s", got, n, buf.String())
	}
}
