package relay

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/percpu"
)

// TestUDPRelayAllocs checks that relaying a datagram and its reply through
// an established session allocates nothing: the route's reader, the
// session's reply path and the sends are all built on pooled state. The
// count covers the whole process, the client and the echo server included
// (net.UDPConn's Write and Read of a connected socket allocate nothing).
func TestUDPRelayAllocs(t *testing.T) {
	if percpu.RaceEnabled {
		t.Skip("the race detector allocates")
	}
	leakCheck(t)
	e := udpEcho(t, "udp4", "127.0.0.1:0")
	t.Run("alone", func(t *testing.T) { udpAllocs(t, startRelay(t, udpRoute0("127.0.0.1:0", e.LocalAddr(), nil))) })
	// On an address shared by routes, an established client is found
	// among the routes' sessions: no hello is read again.
	t.Run("shared", func(t *testing.T) {
		la := freeUDPPort(t).String()
		tg := Addr{"udp", e.LocalAddr().String()}
		udpAllocs(t, startRelay(t, Config{Routes: []Route{
			{Name: "a", Listen: Addr{"udp", la}, Target: tg, SNI: []string{"a.example"}},
			{Name: "u", Listen: Addr{"udp", la}, Target: tg},
		}}))
	})
}

// udpAllocs counts the allocations of a round trip through route "u" of
// s, to a UDP echo server.
func udpAllocs(t *testing.T, s *Server) {
	c, err := net.DialUDP("udp4", nil, s.Addrs("u")[0].(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(time.Minute))
	msg, buf := []byte("ping through the relay"), make([]byte, 64)
	var failed error
	roundTrip := func() {
		if _, err := c.Write(msg); err != nil && failed == nil {
			failed = err
		}
		if n, err := c.Read(buf); (err != nil || !bytes.Equal(buf[:n], msg)) && failed == nil {
			failed = err
			if failed == nil {
				failed = net.UnknownNetworkError("wrong reply")
			}
		}
	}
	for range 100 { // the session, its pools and the runtime's timers settle
		roundTrip()
	}
	if allocs := testing.AllocsPerRun(500, roundTrip); allocs != 0 {
		t.Errorf("%v allocations per round trip through the relay, want 0", allocs)
	}
	if failed != nil {
		t.Fatal(failed)
	}
}
