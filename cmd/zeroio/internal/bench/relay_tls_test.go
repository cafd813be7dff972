package bench

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"

	"github.com/zeroio/zeroio/internal/percpu"
)

func BenchmarkRelayTLS(b *testing.B) { useZeroio(b); runSuite(b, "RelayTLS") }

// TestRelayTLSSmoke runs every cell of the TLS suite once, as zeroio
// bench --quick does; the zeroio cell of route=sni skips, saying why,
// when zeroio relay does not route by sni.
func TestRelayTLSSmoke(t *testing.T) {
	if why := needTools(); why != "" {
		t.Skip(why)
	}
	if percpu.RaceEnabled {
		t.Skip("the suite's TLS peers under the race detector measure the detector")
	}
	useZeroio(t)
	for _, c := range relayTLSCases(Quick) {
		t.Run(c.Name, func(t *testing.T) {
			m := runCase(t, c.F)
			if m["conn/s"] <= 0 || m["p99-µs"] <= 0 {
				t.Errorf("metrics %v: want conn/s and p99-µs above 0", m)
			}
			if _, ok := m["cpu-µs/conn"]; ok == (Impl(c.Name) == "direct") {
				t.Errorf("metrics %v: cpu-µs/conn is for relays only", m)
			}
		})
	}
}

// TestTLSChurnCatchesMisrouting: a relay that sends a client to the other
// backend fails the case, not just slows it.
func TestTLSChurnCatchesMisrouting(t *testing.T) {
	cert, err := tlsCert()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tlsBackend(cert, 'b')
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	roots := x509Pool(cert)
	if _, err := tlsRoundTrip(ln.Addr().String(), roots, tlsNames[1]); err != nil {
		t.Fatalf("b's own name: %v", err)
	}
	if _, err := tlsRoundTrip(ln.Addr().String(), roots, tlsNames[0]); !errors.Is(err, errMisrouted) {
		t.Fatalf("a's name answered by b: err = %v, want errMisrouted", err)
	}
}

func x509Pool(cert tls.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(cert.Leaf)
	return p
}
