package bench

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// TestUDPRelayPeers checks the RelayUDP suite's external relays on their
// own: each client's datagrams (1 to 8,000 bytes) come back to it intact
// through a session of its own, and the sessions mode opens every session
// and floods through them.
func TestUDPRelayPeers(t *testing.T) {
	for _, impl := range []string{"c-floor", "nginx"} {
		t.Run("impl="+impl, func(t *testing.T) {
			why := udpRelayFloor.whyNot()
			if impl == "nginx" {
				why = nginxStreamWhyNot()
			}
			if why != "" {
				t.Skip(why)
			}
			udpEchoThrough(t, impl, 20)
			runCase(t, func(b *testing.B) { runUDPSessions(b, impl, 100, 64) })
		})
	}
}

// udpEchoThrough sends datagrams from each of clients sockets through
// impl to an echo server and checks each reply, and that the server heard
// from as many sources as there were clients.
func udpEchoThrough(t *testing.T, impl string, clients int) {
	srv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	sources := map[netip.AddrPort]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			n, from, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			mu.Lock()
			sources[from] = true
			mu.Unlock()
			srv.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	defer func() { srv.Close(); <-done }()
	p, err := startRelayProc(impl, "udp://"+srv.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	ra := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(p.addr))
	buf := make([]byte, 65536)
	for i := range clients {
		c, err := net.DialUDP("udp4", nil, ra)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, size := range []int{1, 1400, 8000} {
			msg := bytes.Repeat([]byte(fmt.Sprintf("%d/%d;", i, size)), size)[:size]
			// Loopback loses nothing here, but a reply is waited for a
			// bounded time and the datagram sent again, three times.
			var got []byte
			for try := 0; try < 3 && !bytes.Equal(got, msg); try++ {
				c.Write(msg)
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				n, err := c.Read(buf)
				if err == nil {
					got = buf[:n]
				}
			}
			if !bytes.Equal(got, msg) {
				t.Fatalf("client %d, %d bytes: got %d bytes back, not what was sent", i, size, len(got))
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sources) != clients {
		t.Errorf("the server heard from %d sources, want one per client (%d)", len(sources), clients)
	}
}
