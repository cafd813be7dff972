package bench

import (
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeroio/zeroio/udp"
)

// The RelayUDP suite's sessions mode: a windowed flood (see runUDPFlood)
// from many clients at once through each relay to a counting sink, as a
// DNS, syslog or QUIC front sees them. Each client is a session of the
// relay: a source address of its own (127.1.x.y, loopback), its
// datagrams sent in turn, one each, by one socket that picks its source
// per datagram (IP_PKTINFO), so that the sender costs little per datagram
// however many sessions there are. The metrics: datagrams delivered per
// second, the relay's CPU time per datagram delivered (all its processes:
// nginx's workers) and, from 100 sessions up, its resident memory per
// session (VmRSS after the flood less before the sessions opened).

// sessionLoads are the session counts and datagram sizes the mode runs.
func sessionLoads(sc Scale) (sessions, sizes []int) {
	switch sc {
	case Quick:
		return []int{100}, []int{64}
	case Full:
		return []int{1, 100, 1000}, []int{64, 1400}
	}
	return []int{100, 1000}, []int{64}
}

func relayUDPSessionCases(sc Scale, impls []string) []Case {
	sessions, sizes := sessionLoads(sc)
	var cs []Case
	for _, size := range sizes {
		for _, n := range sessions {
			for _, impl := range impls {
				if impl == "socat" {
					continue // a process per session: not a peer at this load
				}
				cs = append(cs, Case{fmt.Sprintf("mode=sessions/sessions=%d/size=%d/impl=%s", n, size, impl), func(b *testing.B) {
					runUDPSessions(b, impl, n, size)
				}})
			}
		}
	}
	return cs
}

func runUDPSessions(b *testing.B, impl string, sessions, size int) {
	sc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		fatal(b, err)
	}
	setSockBuf(b, sc, relayUDPBuf)
	sink, err := udp.NewConn(sc, nil)
	if err != nil {
		sc.Close()
		fatal(b, err)
	}
	defer sink.Close()
	addr, p := viaRelay(b, impl, "udp://"+sc.LocalAddr().String())
	defer p.stop()
	nc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		fatal(b, err)
	}
	setSockBuf(b, nc, relayUDPBuf)
	c, err := udp.NewConn(nc, &udp.Options{DisableGSO: true, DisableGRO: true})
	if err != nil {
		nc.Close()
		fatal(b, err)
	}
	defer c.Close()
	msgs := sessionMessages(sessions, size, netip.MustParseAddrPort(addr))
	rss0 := treeRSS(p)
	openSessions(b, c, sink, msgs)
	var got atomic.Int64
	wake := make(chan struct{}, 1)
	go countBatches(sink, &got, wake)
	cpu0 := treeCPUNs(p)
	delivered := flood(b, c, msgs, &got, wake)
	if p != nil && delivered > 0 {
		b.ReportMetric(float64(treeCPUNs(p)-cpu0)/float64(delivered), "cpu-ns/dgram")
		if sessions >= 100 {
			b.ReportMetric((treeRSS(p)-rss0)/float64(sessions), "KiB/session")
		}
	}
}

// sessionMessages returns a datagram of size bytes to dst from each of n
// sources, 127.1.x.y.
func sessionMessages(n, size int, dst netip.AddrPort) []udp.Message {
	payload := make([]byte, size)
	msgs := make([]udp.Message, n)
	for i := range msgs {
		src := netip.AddrFrom4([4]byte{127, 1, byte(i / 250), byte(i%250 + 1)})
		msgs[i] = udp.Message{Buf: payload, Addr: dst, Local: src}
	}
	return msgs
}

// openSessions sends a datagram from each source of msgs until the sink
// has heard from as many sources (the relay's upstream sockets, one per
// session, or the clients themselves without a relay), so that the flood
// measures relaying rather than the opening of sessions. At most five
// rounds of a second each.
func openSessions(b *testing.B, c, sink *udp.Conn, msgs []udp.Message) {
	seen := map[netip.AddrPort]bool{}
	in := make([]udp.Message, 64)
	for i := range in {
		in[i].Buf = make([]byte, 2048)
	}
	for round := 0; round < 5 && len(seen) < len(msgs); round++ {
		for i := 0; i < len(msgs); i += floodBatch {
			if _, err := c.WriteAll(msgs[i:min(i+floodBatch, len(msgs))]); err != nil {
				fatal(b, err)
			}
		}
		sink.SetReadDeadline(time.Now().Add(time.Second))
		for len(seen) < len(msgs) {
			n, err := sink.ReadBatch(in)
			if err != nil {
				break
			}
			for _, m := range in[:n] {
				seen[m.Addr] = true
			}
		}
	}
	sink.SetReadDeadline(time.Time{})
	if len(seen) < len(msgs) {
		fatalf(b, "the target heard from %d sources of %d sessions", len(seen), len(msgs))
	}
}
