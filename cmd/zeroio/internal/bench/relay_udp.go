package bench

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeroio/zeroio/udp"
)

// relayUDPCases: 64-byte ping-pong through each UDP relay to an echo
// server (one op is one round trip; p50 and p99 are reported), and a
// windowed flood of 1400-byte datagrams to a counting sink (one op is one
// datagram sent; the delivered rate and share are reported): from a client
// that sends each datagram as its own packet (flood), from one that sends
// with UDP GSO as QUIC stacks do on Linux (flood-gso), and from the target
// back to the client (flood-down). Then the flood from many clients at
// once (sessions, relay_udp_sessions.go).
func relayUDPCases(sc Scale) []Case {
	modes := []struct {
		name string
		run  func(b *testing.B, impl string)
	}{
		{"pingpong/size=64", func(b *testing.B, impl string) { runUDPPingPong(b, impl, 64) }},
		{"flood/size=1400", func(b *testing.B, impl string) { runUDPFlood(b, impl, 1400, false) }},
		{"flood-gso/size=1400", func(b *testing.B, impl string) { runUDPFlood(b, impl, 1400, true) }},
		{"flood-down/size=1400", func(b *testing.B, impl string) { runUDPFloodDown(b, impl, 1400) }},
	}
	impls := relayUDPImpls()
	var cs []Case
	for _, m := range modes {
		for _, impl := range impls {
			// Below --full, nginx and the C relay only in the ping-pong
			// and the sessions mode, which cover what the floods do.
			if sc < Full && m.name != modes[0].name && (impl == "nginx" || impl == "c-floor") {
				continue
			}
			cs = append(cs, Case{fmt.Sprintf("mode=%s/impl=%s", m.name, impl), func(b *testing.B) { m.run(b, impl) }})
		}
	}
	return append(cs, relayUDPSessionCases(sc, impls)...)
}

// relayUDPImpls are the relays the suite compares, those that can run
// here: direct delivery (no relay), zeroio, the naive Go relay, socat,
// nginx stream and the minimal C relay.
func relayUDPImpls() []string {
	var impls []string
	for _, impl := range []string{"direct", "zeroio", "stdnet", "socat", "nginx", "c-floor"} {
		switch {
		case impl == "nginx" && nginxStreamWhyNot() != "",
			impl == "c-floor" && udpRelayFloor.whyNot() != "",
			!havePeer(impl):
			continue
		}
		impls = append(impls, impl)
	}
	return impls
}

// udpPeer starts a UDP echo server (or, with echo false, a counting sink)
// on loopback and the relay in front of it; it returns the address to send
// to and a stop function.
func udpPeer(b *testing.B, impl string, echo bool, count *atomic.Int64, wake chan struct{}) (string, func()) {
	if impl == "socat" {
		if why := needTools("socat"); why != "" {
			skip(b, why)
		}
	}
	srv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		fatal(b, err)
	}
	setSockBuf(b, srv, relayUDPBuf)
	if echo {
		go func() {
			buf := make([]byte, 2048)
			for {
				n, from, err := srv.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				srv.WriteToUDPAddrPort(buf[:n], from)
			}
		}()
	} else {
		go countDatagrams(srv, count, wake)
	}
	if impl == "direct" {
		return srv.LocalAddr().String(), func() { srv.Close() }
	}
	p, err := startRelayProc(impl, "udp://"+srv.LocalAddr().String())
	if err != nil {
		srv.Close()
		fatal(b, err)
	}
	return p.addr, func() { p.stop(); srv.Close() }
}

// relayUDPBuf sizes the buffers of every UDP socket in these benchmarks,
// the relays' included: the zeroio relay's default (Route.UDPBuffer), and
// net.core.rmem_max here, so that socat's rcvbuf option reaches it too.
const relayUDPBuf = 4 << 20

// dialUDP connects a client socket to the relay (or the peer) at addr.
func dialUDP(b *testing.B, addr string) *net.UDPConn {
	ra, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		fatal(b, err)
	}
	c, err := net.DialUDP("udp4", nil, ra)
	if err != nil {
		fatal(b, err)
	}
	setSockBuf(b, c, relayUDPBuf)
	return c
}

func runUDPPingPong(b *testing.B, impl string, size int) {
	// Client, echo server and relay on one CPU: see pinProcess.
	defer pinProcess(0)()
	addr, stop := udpPeer(b, impl, true, nil, nil)
	defer stop()
	c := dialUDP(b, addr)
	defer c.Close()
	msg := make([]byte, size)
	buf := make([]byte, 2048)
	ping := func() bool {
		c.Write(msg)
		c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(buf)
		return err == nil
	}
	for range 100 { // the session (socat: the forked child) is set up
		ping()
	}
	lat := make([]time.Duration, 0, min(b.N, 1<<20))
	lost := 0
	b.ReportAllocs()
	b.SetBytes(int64(2 * size))
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if !ping() {
			lost++
			continue
		}
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(t0))
		}
	}
	b.StopTimer()
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
	}
	b.ReportMetric(float64(lost), "lost")
}

// countDatagrams counts the datagrams that reach c, reading them in
// batches (with GRO where the kernel has it) so that the counting end is
// never what limits a flood.
func countDatagrams(c *net.UDPConn, count *atomic.Int64, wake chan struct{}) {
	uc, err := udp.NewConn(c, nil)
	if err != nil {
		return
	}
	countBatches(uc, count, wake)
}

// countBatches is countDatagrams on a udp.Conn, until it is closed.
func countBatches(uc *udp.Conn, count *atomic.Int64, wake chan struct{}) {
	msgs := make([]udp.Message, 64)
	for i := range msgs {
		msgs[i].Buf = make([]byte, 2048)
	}
	for {
		n, err := uc.ReadBatch(msgs)
		if err != nil {
			return
		}
		count.Add(int64(n))
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

// runUDPFlood keeps at most window datagrams in flight (sent but not yet
// counted by the sink), so the rate measured is what the relay sustains
// rather than what the kernel drops; a window that stalls for 20 ms is
// written off as lost. A full window blocks on the sink's signal rather
// than spinning, which would take a core from the relay.
//
// The client sends with sendmmsg, up to 32 datagrams a call, and the sink
// reads in batches: the two ends cost little per datagram, so the rate is
// the relay's, not the load generator's (with one datagram per call at each
// end, direct delivery itself topped out near 400k/s here). Without gso
// each datagram is its own UDP packet; with it, the client's kernel sends
// each call's datagrams as one GSO packet (what quic-go and wireguard-go
// do), which a relay may read whole with GRO.
//
// The window of 1,024 datagrams (about 2.3 MB of socket memory at 1,400
// bytes) fits in the 4 MiB buffers that every relay's sockets get here
// (relayUDPBuf), so a relay descheduled for a moment loses nothing; with
// the kernel's default buffers (212,992 bytes hold about 90 such
// datagrams) a window of 128 already overflowed, and each loss costs a
// 20 ms stall.
func runUDPFlood(b *testing.B, impl string, size int, gso bool) {
	var got atomic.Int64
	wake := make(chan struct{}, 1)
	addr, stop := udpPeer(b, impl, false, &got, wake)
	defer stop()
	nc := dialUDP(b, addr)
	c, err := udp.NewConn(nc, &udp.Options{DisableGSO: !gso, DisableGRO: true})
	if err != nil {
		nc.Close()
		fatal(b, err)
	}
	defer c.Close()
	msgs := floodMessages(size, netip.AddrPort{})
	// Set up the session first.
	for i := 0; got.Load() == 0 && i < 100; i++ {
		c.WriteBatch(msgs[:1])
		time.Sleep(10 * time.Millisecond)
	}
	flood(b, c, msgs, &got, wake)
}

// runUDPFloodDown is the flood the other way: the target sends to the
// client through the session the client's first datagram opened (a
// download over QUIC or WireGuard), batched and windowed as the flood's
// client sends, and the client counts in batches.
func runUDPFloodDown(b *testing.B, impl string, size int) {
	sc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		fatal(b, err)
	}
	setSockBuf(b, sc, relayUDPBuf)
	src, err := udp.NewConn(sc, &udp.Options{DisableGSO: true, DisableGRO: true})
	if err != nil {
		sc.Close()
		fatal(b, err)
	}
	defer src.Close()
	addr, p := viaRelay(b, impl, "udp://"+sc.LocalAddr().String())
	defer p.stop()
	nc := dialUDP(b, addr)
	client, err := udp.NewConn(nc, nil)
	if err != nil {
		nc.Close()
		fatal(b, err)
	}
	defer client.Close()
	// Open the session; the target learns where to send (the relay's
	// upstream socket, or the client itself).
	in := []udp.Message{{Buf: make([]byte, 2048)}}
	var peer netip.AddrPort
	for i := 0; i < 100 && !peer.IsValid(); i++ {
		client.WriteBatch([]udp.Message{{Buf: []byte("hello")}})
		src.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if n, err := src.ReadBatch(in); err == nil && n > 0 {
			peer = in[0].Addr
		}
	}
	if !peer.IsValid() {
		fatal(b, "no datagram reached the target")
	}
	var got atomic.Int64
	wake := make(chan struct{}, 1)
	go countBatches(client, &got, wake)
	flood(b, src, floodMessages(size, peer), &got, wake)
}

// floodWindow and floodBatch: at most 1,024 datagrams in flight, sent 32
// at a time (see runUDPFlood).
const floodWindow, floodBatch = 1024, 32

func floodMessages(size int, to netip.AddrPort) []udp.Message {
	msgs := make([]udp.Message, floodBatch)
	for i := range msgs {
		msgs[i] = udp.Message{Buf: make([]byte, size), Addr: to}
	}
	return msgs
}

// flood sends b.N datagrams on c, at most floodWindow ahead of got, taking
// msgs in turn (at most floodBatch a call), and reports what arrived,
// which it returns.
func flood(b *testing.B, c *udp.Conn, msgs []udp.Message, got *atomic.Int64, wake chan struct{}) int64 {
	b.ReportAllocs()
	b.SetBytes(int64(len(msgs[0].Buf)))
	got.Store(0)
	var sent, written int64 // written: sent minus what was written off
	next := 0               // the message to send next
	start := time.Now()
	b.ResetTimer()
	stall := time.NewTimer(time.Hour)
	defer stall.Stop()
	for sent < int64(b.N) {
		g := got.Load()
		if room := min(floodWindow-(written-g), int64(b.N)-sent, floodBatch, int64(len(msgs)-next)); room > 0 {
			n, err := c.WriteAll(msgs[next : next+int(room)])
			if err != nil && n == 0 {
				fatal(b, err)
			}
			next = (next + n) % len(msgs)
			sent += int64(n)
			written += int64(n)
			continue
		}
		stall.Reset(20 * time.Millisecond)
		select {
		case <-wake:
		case <-stall.C:
			written = got.Load() // the window's datagrams are lost
		}
	}
	// Let the tail arrive.
	for deadline := time.Now().Add(100 * time.Millisecond); got.Load() < sent && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	g := got.Load()
	b.ReportMetric(float64(g)/elapsed.Seconds(), "delivered/s")
	b.ReportMetric(100*float64(g)/float64(sent), "delivered-%")
	return g
}
