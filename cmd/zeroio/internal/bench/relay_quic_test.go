package bench

import (
	"strings"
	"testing"

	"github.com/zeroio/zeroio/internal/percpu"
)

func BenchmarkRelayQUIC(b *testing.B) { useZeroio(b); runSuite(b, "RelayQUIC") }

// TestRelayQUICSmoke runs every cell of the QUIC relay suite once, as
// zeroio bench --quick does. zeroio follows each connection across its
// rebinding, so every echo of its rebind cell arrives intact, and routes
// every connection of its sni cell to the server it named.
func TestRelayQUICSmoke(t *testing.T) {
	if why := needTools(); why != "" {
		t.Skip(why)
	}
	if percpu.RaceEnabled {
		t.Skip("quic-go's crypto under the race detector measures the detector")
	}
	useZeroio(t)
	for _, c := range relayQUICCases(Quick) {
		t.Run(c.Name, func(t *testing.T) {
			m := runCase(t, c.F)
			t.Logf("%v", m)
			switch {
			case strings.HasPrefix(c.Name, "case=handshake/"):
				if m["handshakes/s"] <= 0 || m["cpu-µs/conn"] <= 0 {
					t.Errorf("metrics %v: want handshakes/s and cpu-µs/conn above 0", m)
				}
			case strings.HasPrefix(c.Name, "case=sni/"):
				if m["handshakes/s"] <= 0 || Impl(c.Name) == "zeroio" && m["named-%"] != 100 {
					t.Errorf("metrics %v: want handshakes/s above 0 and, through zeroio, every connection at the server it named", m)
				}
			case strings.HasPrefix(c.Name, "case=bulk/"):
				if m["cpu-s/GiB"] <= 0 {
					t.Errorf("metrics %v: want cpu-s/GiB above 0", m)
				}
			case Impl(c.Name) == "zeroio":
				if m["survived-%"] != 100 {
					t.Errorf("metrics %v: zeroio lost connections across a rebinding", m)
				}
			}
		})
	}
}
