package bench

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// The RelayQUIC suite: quic-go clients through a UDP relay that balances
// over two quic-go servers (relay_quic_peers.go), every impl in front of
// the same two:
//   - zeroio: the `zeroio relay` command, round-robin over the two, its
//     QUIC sessions following connection IDs;
//   - nginx: nginx stream's UDP proxy, hash $remote_addr$remote_port
//     consistent; nginx-rr (--full): its default round-robin.
//
// Cases, each client a socket of its own on 127.0.0.1:
//   - handshake: new connections, quicClients at a time, each closed
//     once its handshake completes; handshakes per second and the
//     relay's CPU per connection;
//   - bulk: one connection uploading size bytes per op on a new stream;
//     MB/s and the relay's CPU seconds per GiB;
//   - sni: new connections as in handshake, each naming one of the two
//     servers, routed by that name (relay_quic_sni.go);
//   - rebind: conns connections per op (quicClients at a time), each
//     echoing echo bytes through a NAT shim of its own that moves it to a
//     new source port halfway; the share of connections whose echo comes
//     back intact. A relay that balances by client address sends the new
//     port to any server, the right one about 1/n of the time with n
//     servers; the others reset it.

// quicClients is how many clients connect at once in the handshake and
// rebind cases: enough that the relay is never idle while one client
// computes.
const quicClients = 4

// relayQUICImpls are the relays the suite compares, those that run here.
func relayQUICImpls(sc Scale) []string {
	impls := []string{"zeroio"}
	if nginxStreamWhyNot() == "" {
		impls = append(impls, "nginx")
		if sc == Full {
			impls = append(impls, "nginx-rr")
		}
	}
	return impls
}

func relayQUICCases(sc Scale) []Case {
	sizes, echo, conns := []int{8 << 20}, 256<<10, 16
	switch sc {
	case Quick:
		sizes, echo, conns = []int{1 << 20}, 64<<10, 8
	case Full:
		sizes, conns = []int{8 << 20, 32 << 20}, 32
	}
	impls := relayQUICImpls(sc)
	var cs []Case
	for _, impl := range impls {
		cs = append(cs, Case{"case=handshake/impl=" + impl, func(b *testing.B) { runQUICHandshakes(b, impl) }})
	}
	for _, impl := range impls {
		if impl != "nginx-rr" {
			cs = append(cs, Case{"case=sni/impl=" + impl, func(b *testing.B) { runQUICSNI(b, impl) }})
		}
	}
	for _, size := range sizes {
		for _, impl := range impls {
			cs = append(cs, Case{fmt.Sprintf("case=bulk/size=%d/impl=%s", size, impl), func(b *testing.B) { runQUICBulk(b, impl, size) }})
		}
	}
	for _, impl := range impls {
		cs = append(cs, Case{"case=rebind/impl=" + impl, func(b *testing.B) { runQUICRebind(b, impl, conns, echo) }})
	}
	return cs
}

// quicBehind starts the servers and impl in front of them, and returns
// them and the address clients send to; stop stops both.
func quicBehind(b *testing.B, impl string) (f *quicFarm, p *relayProc, addr netip.AddrPort, stop func()) {
	skipWithoutZeroio(b, impl)
	f, err := startQUICFarm()
	if err != nil {
		fatal(b, err)
	}
	p, err = startQUICRelay(impl, f.addrs())
	if err != nil {
		f.close()
		fatal(b, err)
	}
	return f, p, netip.MustParseAddrPort(p.addr), func() { p.stop(); f.close() }
}

// dialQUICVia connects to addr from a new socket on 127.0.0.1; closing
// the connection's transport (done) closes the socket.
func dialQUICVia(ctx context.Context, addr netip.AddrPort, tc *tls.Config, qc *quic.Config) (c *quic.Conn, done func(), err error) {
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, nil, err
	}
	tr := &quic.Transport{Conn: pc}
	if c, err = tr.Dial(ctx, net.UDPAddrFromAddrPort(addr), tc, qc); err != nil {
		tr.Close()
		pc.Close()
		return nil, nil, err
	}
	return c, func() { c.CloseWithError(0, ""); tr.Close(); pc.Close() }, nil
}

func runQUICHandshakes(b *testing.B, impl string) {
	f, p, addr, stop := quicBehind(b, impl)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b.ReportAllocs()
	cpu0 := treeCPUNs(p)
	start := time.Now()
	b.ResetTimer()
	err := inTurns(b.N, func() error {
		_, done, err := dialQUICVia(ctx, addr, f.cli, quicConfig)
		if err == nil {
			done()
		}
		return err
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		fatal(b, fmt.Errorf("handshake through %s: %w", impl, err))
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "handshakes/s")
	b.ReportMetric(float64(treeCPUNs(p)-cpu0)/1e3/float64(b.N), "cpu-µs/conn")
}

// inTurns calls do n times, quicClients calls at a time, and returns the
// first error; once one failed, no further call starts.
func inTurns(n int, do func() error) error {
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range quicClients {
		wg.Go(func() {
			for failed.Load() == nil && next.Add(1) <= int64(n) {
				if err := do(); err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	return nil
}

func runQUICBulk(b *testing.B, impl string, size int) {
	f, p, addr, stop := quicBehind(b, impl)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, done, err := dialQUICVia(ctx, addr, f.cli, quicConfig)
	if err != nil {
		fatal(b, err)
	}
	defer done()
	data := make([]byte, 1<<20)
	rand.Read(data)
	head := []byte{streamSink}
	b.ReportAllocs()
	b.SetBytes(int64(size))
	cpu0 := treeCPUNs(p)
	b.ResetTimer()
	for range b.N {
		if err := quicUpload(ctx, c, head, data, size); err != nil {
			fatal(b, err)
		}
	}
	b.StopTimer()
	gib := float64(b.N) * float64(size) / (1 << 30)
	b.ReportMetric(float64(treeCPUNs(p)-cpu0)/1e9/gib, "cpu-s/GiB")
}

// quicRebindConfig bounds how long a connection the relay lost takes to
// fail when no reset reaches it: a loopback echo takes milliseconds.
var quicRebindConfig = &quic.Config{MaxIdleTimeout: 2 * time.Second, HandshakeIdleTimeout: 2 * time.Second}

func runQUICRebind(b *testing.B, impl string, conns, size int) {
	f, _, addr, stop := quicBehind(b, impl)
	defer stop()
	data := make([]byte, size)
	rand.Read(data)
	want := sha256.Sum256(data)
	// Half the datagrams an upload of size takes, after the handshake's.
	after := 4 + size/2800
	// Every shim's sockets stay open until the case ends, so that the
	// kernel gives no later shim a port an earlier connection used: the
	// relays keep a session per client address until it times out, and a
	// datagram from an address that has one goes to that session's
	// server, whatever connection it belongs to. A rebinding onto such a
	// port is another case than the one measured here.
	var mu sync.Mutex
	var shims []*rebinder
	defer func() {
		for _, r := range shims {
			r.close()
		}
	}()
	// No SetBytes: a connection the relay loses ends early, and MB/s
	// would count that as speed.
	b.ReportAllocs()
	var survived atomic.Int64
	b.ResetTimer()
	err := inTurns(b.N*conns, func() error {
		r, err := newRebinder(addr, after)
		if err != nil {
			return err
		}
		mu.Lock()
		shims = append(shims, r)
		mu.Unlock()
		ok, err := rebindEcho(r, f.cli, data, want)
		if ok {
			survived.Add(1)
		}
		return err
	})
	b.StopTimer()
	if err != nil {
		fatal(b, err)
	}
	b.ReportMetric(100*float64(survived.Load())/float64(b.N*conns), "survived-%")
}

// rebindEcho echoes data over a new connection through r, which moves it
// to a new port partway, and reports whether the echo came back intact.
// An error is a failure of the benchmark, not of the relay: the shim did
// not rebind, or the handshake, before any rebinding, failed.
func rebindEcho(r *rebinder, tc *tls.Config, data []byte, want [32]byte) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, done, err := dialQUICVia(ctx, r.front.LocalAddr().(*net.UDPAddr).AddrPort(), tc, quicRebindConfig)
	if err != nil {
		return false, fmt.Errorf("handshake: %w", err)
	}
	defer done()
	intact := echoOnce(ctx, c, data, want) == nil
	if !r.rebound() {
		return false, errors.New("the connection ended before the shim rebound it: the case measured nothing")
	}
	return intact, nil
}

// echoOnce sends data on a new stream and checks the echo by its hash.
func echoOnce(ctx context.Context, c *quic.Conn, data []byte, want [32]byte) error {
	s, err := c.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	go func() {
		s.Write([]byte{streamEcho})
		s.Write(data)
		s.Close()
	}()
	h := sha256.New()
	n, err := io.Copy(h, s)
	if err != nil {
		return err
	}
	if n != int64(len(data)) || [32]byte(h.Sum(nil)) != want {
		return errors.New("echo differs from what was sent")
	}
	return nil
}

// relayQUICNotes says what the suite ran with and what it left out.
func relayQUICNotes() []string {
	notes := []string{"quic-go clients and two quic-go servers (TLS 1.3, ECDSA P-256) behind each relay; zeroio round-robin, nginx hash $remote_addr$remote_port consistent",
		"sni: zeroio routes each name to its server by the QUIC ClientHello; nginx stream cannot read a QUIC ClientHello (ssl_preread is TLS over TCP only) and routes by address, as in the other cases: named-% is the share of connections that reached the server they named"}
	if why := nginxStreamWhyNot(); why != "" {
		notes = append(notes, "skipped nginx: "+why)
	}
	if ZeroioCommand == "" {
		notes = append(notes, "skipped zeroio: no zeroio executable to run")
	}
	return notes
}

func init() {
	register(Suite{Group: "relay-quic", Name: "RelayQUIC", Cases: relayQUICCases, Metric: "handshakes/s",
		AlsoChart: []string{"cpu-µs/conn", "named-%", "MB/s", "cpu-s/GiB", "survived-%"},
		Available: func() string { return needTools() }, Notes: relayQUICNotes})
}
