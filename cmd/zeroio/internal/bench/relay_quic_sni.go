package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// The RelayQUIC suite's sni case: quic-go clients name one of two
// servers in their ClientHello, half each, through a relay in front of
// both:
//   - zeroio: two UDP routes on one port, one per name, chosen by the
//     QUIC ClientHello;
//   - nginx: nginx stream cannot read a QUIC ClientHello (ssl_preread
//     reads TLS over TCP only), so it runs its closest configuration,
//     the other cases' hash by client address and port.
//
// Each server's certificate is valid for both names, so a client sent to
// the other server still completes its handshake: the case reports
// handshakes per second, the relay's CPU per connection, and named-%, the
// share of connections that reached the server they named (told by the
// certificate's common name).

var quicSNINames = [2]string{"a.quic.bench.example", "b.quic.bench.example"}

// startQUICSNIFarm starts two servers with a certificate each, and
// returns the client configs for each name.
func startQUICSNIFarm() (*quicFarm, [2]*tls.Config, error) {
	var srv, cli [2]*tls.Config
	pool := x509.NewCertPool()
	for i := range srv {
		cert, x, err := quicCert(fmt.Sprintf("server-%d", i), quicSNINames[:]...)
		if err != nil {
			return nil, cli, err
		}
		srv[i] = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{quicProto}}
		pool.AddCert(x)
	}
	for i := range cli {
		cli[i] = &tls.Config{RootCAs: pool, ServerName: quicSNINames[i], NextProtos: []string{quicProto}}
	}
	f, err := startQUICFarmWith(srv, cli[0])
	return f, cli, err
}

// startQUICSNIRelay starts impl in front of the two servers: zeroio
// routing each name to its server, nginx as in the other cases.
func startQUICSNIRelay(impl string, targets []string) (*relayProc, error) {
	if impl != "zeroio" {
		return startQUICRelay(impl, targets)
	}
	port, err := freePort("udp")
	if err != nil {
		return nil, err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	conf, err := os.CreateTemp("", "zeroio-quic-sni-*.yaml")
	if err != nil {
		return nil, err
	}
	defer os.Remove(conf.Name())
	fmt.Fprintf(conf, `routes:
  - {name: a, listen: udp://%[1]s, sni: [%[2]s], target: udp://%[3]s}
  - {name: b, listen: udp://%[1]s, sni: [%[4]s], target: udp://%[5]s}
`, listen, quicSNINames[0], targets[0], quicSNINames[1], targets[1])
	conf.Close()
	if why := zeroioRejects(conf.Name()); why != "" {
		return nil, fmt.Errorf("zeroio relay does not route QUIC by sni: %s", why)
	}
	bound := func(exited <-chan struct{}) bool { return waitOrExit(exited, func() bool { return udpBound(port) }) }
	return startZeroioUntil(impl, listen, bound, "-c", conf.Name())
}

func runQUICSNI(b *testing.B, impl string) {
	skipWithoutZeroio(b, impl)
	f, cli, err := startQUICSNIFarm()
	if err != nil {
		fatal(b, err)
	}
	defer f.close()
	p, err := startQUICSNIRelay(impl, f.addrs())
	if err != nil {
		fatal(b, err)
	}
	defer p.stop()
	addr := netip.MustParseAddrPort(p.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var n, named atomic.Int64
	b.ReportAllocs()
	cpu0 := treeCPUNs(p)
	start := time.Now()
	b.ResetTimer()
	err = inTurns(b.N, func() error {
		i := n.Add(1) % 2
		c, done, err := dialQUICVia(ctx, addr, cli[i], quicConfig)
		if err != nil {
			return err
		}
		if certs := c.ConnectionState().TLS.PeerCertificates; len(certs) > 0 && certs[0].Subject.CommonName == fmt.Sprintf("server-%d", i) {
			named.Add(1)
		}
		done()
		return nil
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		fatal(b, fmt.Errorf("handshake through %s: %w", impl, err))
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "handshakes/s")
	b.ReportMetric(float64(treeCPUNs(p)-cpu0)/1e3/float64(b.N), "cpu-µs/conn")
	b.ReportMetric(100*float64(named.Load())/float64(b.N), "named-%")
}
