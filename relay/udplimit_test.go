package relay

import (
	"log/slog"
	"net"
	"strings"
	"testing"
)

// A UDP route at its session limit drops the datagrams of new clients,
// counts every one, and says so in one log line for the episode, not a
// line per datagram.
func TestUDPSessionLimitLogged(t *testing.T) { forEachEngine(t, testUDPSessionLimitLogged) }

func testUDPSessionLimitLogged(t *testing.T) {
	leakCheck(t)
	e := udpEcho(t, "udp4", "127.0.0.1:0")
	var buf syncBuffer
	cfg := udpRoute0("127.0.0.1:0", e.LocalAddr(), func(r *Route) { r.MaxSessions = 1 })
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	s := startRelay(t, cfg)
	ra := s.Addrs("u")[0].(*net.UDPAddr)
	if got := askUDP(dialUDP(t, ra)); got != "who?" { // the one session
		t.Fatalf("first client's echo %q", got)
	}
	const n = 10
	for range n {
		if _, err := dialUDP(t, ra).Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return s.Stats().Routes[0].DropsSessionLimit == n })
	if st := s.Stats().Routes[0]; st.Sessions != 1 || st.SessionsTotal != 1 {
		t.Errorf("Stats: %d sessions, %d in all; want 1, 1", st.Sessions, st.SessionsTotal)
	}
	if got := strings.Count(buf.String(), "UDP route at its session limit"); got != 1 {
		t.Errorf("%d lines for %d datagrams dropped at the session limit, want 1:\n%s", got, n, buf.String())
	}
	if !strings.Contains(buf.String(), "max_sessions=1") {
		t.Errorf("the line does not give the limit:\n%s", buf.String())
	}
}
