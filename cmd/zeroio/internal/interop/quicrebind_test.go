package interop

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/zeroio/zeroio/quicudp"
	"github.com/zeroio/zeroio/relay"
)

// selfSigned returns a server config with a fresh certificate for names,
// and a client pool that trusts it.
func selfSigned(t *testing.T, names ...string) (*tls.Config, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, NextProtos: []string{"echo"}}, pool
}

// quicEcho serves QUIC on loopback, echoing every stream, until the test
// ends.
func quicEcho(t *testing.T, tc *tls.Config) *quic.Listener {
	t.Helper()
	return quicEchoOn(t, &quic.Transport{Conn: listenUDP(t)}, tc)
}

// quicEchoOn is quicEcho on the transport tr.
func quicEchoOn(t *testing.T, tr *quic.Transport, tc *tls.Config) *quic.Listener {
	t.Helper()
	ln, err := tr.Listen(tc, &quic.Config{MaxIdleTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); tr.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			wg.Go(func() {
				for {
					s, err := c.AcceptStream(context.Background())
					if err != nil {
						return
					}
					wg.Go(func() { io.Copy(s, s); s.Close() })
				}
			})
		}
	})
	return ln
}

// rebinder stands for a NAT between a client and the relay that gives
// the client's flow a new source port every few datagrams: the client
// sends to front, and each of its datagrams leaves from the newest of
// the rebinder's upstream sockets.
type rebinder struct {
	front *net.UDPConn
	to    netip.AddrPort
	every int

	mu     sync.Mutex
	client netip.AddrPort
	ups    []*net.UDPConn
	n      int
	wg     sync.WaitGroup
}

func newRebinder(t *testing.T, to netip.AddrPort, every int) *rebinder {
	front, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	r := &rebinder{front: front, to: to, every: every}
	r.wg.Go(r.run)
	t.Cleanup(func() {
		front.Close()
		r.mu.Lock()
		for _, u := range r.ups {
			u.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

func (r *rebinder) run() {
	buf := make([]byte, 65536)
	for {
		n, from, err := r.front.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		r.mu.Lock()
		r.client = from
		if r.n%r.every == 0 {
			u, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err == nil {
				r.ups = append(r.ups, u)
				r.wg.Go(func() { r.back(u) })
			}
		}
		r.n++
		up := r.ups[len(r.ups)-1]
		r.mu.Unlock()
		up.WriteToUDPAddrPort(buf[:n], r.to)
	}
}

// back passes the relay's replies on u back to the client.
func (r *rebinder) back(u *net.UDPConn) {
	buf := make([]byte, 65536)
	for {
		n, err := u.Read(buf)
		if err != nil {
			return
		}
		r.mu.Lock()
		client := r.client
		r.mu.Unlock()
		r.front.WriteToUDPAddrPort(buf[:n], client)
	}
}

func (r *rebinder) ports() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ups)
}

// TestQUICThroughRebindingNAT: quic-go clients echo bulk data through the
// relay, which balances round-robin over two quic-go servers, while a NAT
// in front of the relay changes their source port again and again. Every
// new address is a new client to an address-keyed relay, which would send
// it to the other server half the time and break the connection; the
// relay follows the connection ID instead, and every echo arrives whole.
func TestQUICThroughRebindingNAT(t *testing.T) {
	tc, roots := selfSigned(t, "localhost")
	a, b := quicEcho(t, tc), quicEcho(t, tc)
	srv, err := relay.New(relay.Config{Routes: []relay.Route{{Name: "q", Listen: relay.Addr{Network: "udp", Address: "127.0.0.1:0"},
		Targets: []relay.Target{{Addr: relay.Addr{Network: "udp", Address: a.Addr().String()}, Weight: 1},
			{Addr: relay.Addr{Network: "udp", Address: b.Addr().String()}, Weight: 1}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ra := srv.Addrs("q")[0].(*net.UDPAddr).AddrPort()

	size := 8 << 20
	if raceEnabled {
		size = 1 << 20 // quic-go's crypto is slow under the race detector
	}
	const conns = 4
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	nats := make([]*rebinder, conns)
	for i := range conns {
		nats[i] = newRebinder(t, ra, 200)
		wg.Go(func() { errs <- echoOver(nats[i].front.LocalAddr().String(), roots, size, byte(i)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	rebinds := 0
	for _, n := range nats {
		rebinds += n.ports() - 1
	}
	st := srv.Stats().Routes[0]
	t.Logf("%d connections, %d rebindings, %d sessions moved", conns, rebinds, st.SessionsMoved)
	if rebinds < conns || st.SessionsMoved == 0 {
		t.Fatalf("%d rebindings, %d sessions moved: the test did not move anyone", rebinds, st.SessionsMoved)
	}
}

// echoOver dials addr, sends size bytes on a stream and checks the echo
// by SHA-256.
func echoOver(addr string, roots *x509.CertPool, size int, seed byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := quic.DialAddr(ctx, addr, &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"echo"}},
		&quic.Config{MaxIdleTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer c.CloseWithError(0, "")
	s, err := c.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7) ^ seed
	}
	want := sha256.Sum256(data)
	go func() { s.Write(data); s.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, s)
	if err != nil {
		return err
	}
	if n != int64(size) || [32]byte(h.Sum(nil)) != want {
		return errors.New("echo differs from what was sent")
	}
	return nil
}

// TestQUICMigrationByServerID: quic-go servers issue connection IDs that
// carry their server ID (quicudp's CIDGenerator), and the relay's route
// knows the IDs. A quic-go client migrates its connection to a new path,
// a new socket sending to a new connection ID the relay has never seen:
// the relay takes it to the server the ID names, which validates the
// path, and the echo goes on across the switch.
func TestQUICMigrationByServerID(t *testing.T) {
	tc, roots := selfSigned(t, "localhost")
	lb := relay.QUICLB{ConfigID: 2, ServerIDLen: 1, NonceLen: 8}
	var targets []relay.Target
	for _, id := range []byte{'a', 'b'} {
		gen, err := quicudp.NewCIDGenerator(quicudp.LBConfig{ConfigID: lb.ConfigID, ServerID: []byte{id}, NonceLen: lb.NonceLen})
		if err != nil {
			t.Fatal(err)
		}
		ln := quicEchoOn(t, &quic.Transport{Conn: listenUDP(t), ConnectionIDGenerator: gen}, tc)
		addr := relay.Addr{Network: "udp", Address: ln.Addr().String()}
		targets = append(targets, relay.Target{Addr: addr, Weight: 1})
		lb.Servers = append(lb.Servers, relay.QUICServer{Target: addr, ID: []byte{id}})
	}
	srv, err := relay.New(relay.Config{Routes: []relay.Route{{Name: "q", Listen: relay.Addr{Network: "udp", Address: "127.0.0.1:0"},
		Targets: targets, QUICLB: &lb}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ra := srv.Addrs("q")[0].(*net.UDPAddr)

	for i := range 4 {
		if err := migrateAndEcho(t, ra, roots, byte(i)); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
}

func listenUDP(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// migrateAndEcho echoes a chunk over a new connection to ra, moves the
// connection to a new path, and echoes another on the same stream.
func migrateAndEcho(t *testing.T, ra *net.UDPAddr, roots *x509.CertPool, seed byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr1 := &quic.Transport{Conn: listenUDP(t)}
	defer tr1.Close()
	c, err := tr1.Dial(ctx, ra, &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"echo"}},
		&quic.Config{MaxIdleTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer c.CloseWithError(0, "")
	s, err := c.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	chunk := func(n int) error {
		out := make([]byte, 64<<10)
		for i := range out {
			out[i] = byte(i) ^ seed ^ byte(n)
		}
		if _, err := s.Write(out); err != nil {
			return err
		}
		in := make([]byte, len(out))
		if _, err := io.ReadFull(s, in); err != nil {
			return err
		}
		if !bytes.Equal(in, out) {
			return errors.New("echo differs")
		}
		return nil
	}
	if err := chunk(0); err != nil {
		return err
	}
	tr2 := &quic.Transport{Conn: listenUDP(t)}
	defer tr2.Close()
	p, err := c.AddPath(tr2)
	if err != nil {
		return err
	}
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	if err := p.Probe(pctx); err != nil {
		return fmt.Errorf("probing the new path: %w", err)
	}
	if err := p.Switch(); err != nil {
		return err
	}
	return chunk(1)
}
