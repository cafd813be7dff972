package relay

import (
	"log/slog"
	"net"
	"strings"
	"testing"
)

// TestUDPSocketFailuresLogByEpisode: when a session's socket will not
// open for lack of descriptors (EMFILE), every datagram of every new
// client fails so; the failures are counted each but logged as other
// floods are: the first in full, then a count every 30 s, not a line per
// datagram.
func TestUDPSocketFailuresLogByEpisode(t *testing.T) {
	leakCheck(t)
	e := udpEcho(t, "udp4", "127.0.0.1:0")
	var buf syncBuffer
	s := startRelay(t, Config{
		Logger: slog.New(slog.NewTextHandler(&buf, nil)),
		Routes: []Route{{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"}, Target: Addr{"udp", e.LocalAddr().String()}}},
	})
	const n = 20
	clients := make([]*net.UDPConn, n)
	for i := range clients {
		clients[i] = dialUDP(t, s.Addrs("u")[0].(*net.UDPAddr))
	}
	release := hogFDs(t, 0)
	defer release()
	for _, c := range clients {
		if _, err := c.Write([]byte("x")); err != nil {
			release()
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return s.Stats().Routes[0].DialErrors == n })
	release()
	if st := s.Stats().Routes[0]; st.DropsWriteError != n || st.SessionsTotal != 0 {
		t.Errorf("Stats: %d dropped, %d sessions; want %d, 0", st.DropsWriteError, st.SessionsTotal, n)
	}
	if tg := s.Stats().Routes[0].Targets[0]; !tg.Up || tg.DialErrors != 0 {
		t.Errorf("target %+v: down for the relay's own lack of descriptors", tg)
	}
	if got := strings.Count(buf.String(), "UDP upstream socket failed"); got != 1 {
		t.Errorf("%d lines for %d failed session sockets, want 1:\n%s", got, n, buf.String())
	}
}
