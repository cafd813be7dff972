package relay

import (
	"net"
	"testing"
	"time"
)

// New sessions of one client address over conn_rate_per_client are
// dropped and counted; the sessions within it are relayed.
func TestUDPSessionRate(t *testing.T) {
	t.Parallel()
	e := udpEcho(t, "udp4", "127.0.0.1:0")
	s := startRelay(t, udpRoute0("127.0.0.1:0", e.LocalAddr(), func(r *Route) {
		r.ConnRatePerClient = ConnRate{N: 3, Per: time.Hour}
	}))
	ra := s.Addrs("u")[0].(*net.UDPAddr)
	answered := 0
	for range 8 { // each socket a new session of 127.0.0.1
		c := dialUDP(t, ra)
		c.Write([]byte("x"))
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Read(make([]byte, 8)); err == nil {
			answered++
		}
	}
	st := s.Stats().Routes[0]
	if answered != 3 || st.SessionsTotal != 3 || st.DropsSessionRate != 5 {
		t.Fatalf("%d sessions answered, %d opened, %d datagrams dropped at the rate; want 3, 3, 5", answered, st.SessionsTotal, st.DropsSessionRate)
	}
}

// A session ends at max_duration however busy it is; the client's next
// datagram opens a new one.
func TestUDPMaxDuration(t *testing.T) {
	t.Parallel()
	e := udpEcho(t, "udp4", "127.0.0.1:0")
	s := startRelay(t, udpRoute0("127.0.0.1:0", e.LocalAddr(), func(r *Route) { r.MaxDuration = 300 * time.Millisecond }))
	c := dialUDP(t, s.Addrs("u")[0].(*net.UDPAddr))
	start := time.Now()
	waitFor(t, func() bool {
		askUDP(c)
		return s.Stats().Routes[0].MaxDurationEnds == 1
	})
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("session ended after %v; want about 300 ms", took)
	}
	if got := askUDP(c); got != "who?" {
		t.Fatalf("after the session ended: %q", got)
	}
	waitFor(t, func() bool { return s.Stats().Routes[0].SessionsTotal >= 2 })
}

// A burst far over a session's rate passes its bucket and a small queue,
// and the rest is dropped and counted, each way; datagrams within the
// rate all pass.
func TestUDPPacing(t *testing.T) {
	for _, dir := range []string{"up", "down"} {
		t.Run("dir="+dir, func(t *testing.T) {
			t.Parallel()
			tg, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			// Up: an echo. Down: each "burst" asks for 50 replies.
			serveUDP(t, tg, func(in []byte) []byte { return in })
			if dir == "down" {
				tg.Close()
				tg, _ = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
				burstServer(t, tg)
			}
			const size = 500
			s := startRelay(t, udpRoute0("127.0.0.1:0", tg.LocalAddr(), func(r *Route) {
				r.UploadRate, r.DownloadRate = 20_000, 20_000 // a 2,000-byte bucket and 1,000 bytes of queue
			}))
			c := dialUDP(t, s.Addrs("u")[0].(*net.UDPAddr))
			if dir == "up" {
				for range 50 {
					c.Write(make([]byte, size))
				}
			} else {
				c.Write([]byte("burst"))
			}
			got := 0
			buf := make([]byte, 2048)
			for {
				c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
				if _, err := c.Read(buf); err != nil {
					break
				}
				got++
			}
			st := s.Stats().Routes[0]
			if got < 3 || got > 10 || st.DropsPaced < 40 || st.PacedBytes == 0 {
				t.Fatalf("%d of 50 datagrams passed, %d dropped at the rate; want about 6 and the rest", got, st.DropsPaced)
			}
		})
	}
}

// burstServer answers "burst" with 50 datagrams of 500 bytes at once.
func burstServer(t *testing.T, c *net.UDPConn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if string(buf[:n]) == "burst" {
				for range 50 {
					c.WriteToUDPAddrPort(make([]byte, 500), from)
				}
			}
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
}
