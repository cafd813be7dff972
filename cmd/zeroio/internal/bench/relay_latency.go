package bench

import (
	"fmt"
	"io"
	"net"
	"slices"
	"testing"
	"time"
)

// relayLatencyCases: 64-byte request and response over one TCP connection
// through each stream relay to an echo server, the traffic of a database or
// cache client behind an L4 proxy. One op is one round trip; p50 and p99
// are reported. As in the UDP ping-pong, client, echo server and relay run
// on one CPU (see pinProcess).
func relayLatencyCases(Scale) []Case {
	var cs []Case
	for _, impl := range relayImpls {
		if !havePeer(impl) {
			continue
		}
		cs = append(cs, Case{fmt.Sprintf("mode=tcp-pingpong/size=64/impl=%s", impl), func(b *testing.B) {
			runTCPPingPong(b, impl, 64)
		}})
	}
	return cs
}

func runTCPPingPong(b *testing.B, impl string, size int) {
	if impl == "haproxy" || impl == "socat" {
		if why := needTools(impl); why != "" {
			skip(b, why)
		}
	}
	defer pinProcess(0)()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		fatal(b, err)
	}
	defer ln.Close()
	go serveConns(ln, func(c net.Conn) { io.Copy(c, c) })
	addr, p := viaRelay(b, impl, "tcp://"+ln.Addr().String())
	defer p.stop()
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		fatal(b, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	msg, buf := make([]byte, size), make([]byte, size)
	ping := func() {
		if _, err := c.Write(msg); err != nil {
			fatal(b, err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			fatal(b, err)
		}
	}
	for range 100 {
		ping()
	}
	lat := make([]time.Duration, 0, min(b.N, 1<<20))
	b.ReportAllocs()
	b.SetBytes(int64(2 * size))
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		ping()
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(t0))
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}
