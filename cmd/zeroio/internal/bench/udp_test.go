package bench

import "testing"

func BenchmarkUDP(b *testing.B)           { runSuite(b, "UDP") }
func BenchmarkUDPThroughput(b *testing.B) { runSuite(b, "UDPThroughput") }

// TestUDPFloor runs the C impls of the UDP suites once each: every
// datagram arrives, and the throughput case reports its CPU time.
func TestUDPFloor(t *testing.T) {
	if why := udpFloor.whyNot(); why != "" {
		t.Skip(why)
	}
	for _, impl := range udpFloorImpls {
		t.Run(impl.name+"/pingpong", func(t *testing.T) {
			runCase(t, func(b *testing.B) { runUDPFloor(b, impl.mode, "pingpong", 64, 16) })
		})
		t.Run(impl.name+"/stream", func(t *testing.T) {
			m := runCase(t, func(b *testing.B) {
				b.SetBytes(udpTPSize)
				r := runUDPFloor(b, impl.mode, "stream", udpTPSize, udpTPBatch)
				reportThroughput(b, r.delivered, 0, r.cpuNs)
				if r.delivered <= 0 || r.delivered > int64(b.N) {
					fatalf(b, "%d of %d datagrams delivered", r.delivered, b.N)
				}
			})
			if m["cpu-s/GiB"] <= 0 {
				t.Errorf("metrics %v: no cpu-s/GiB", m)
			}
		})
	}
}
