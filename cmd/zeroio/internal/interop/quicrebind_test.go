package interop

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

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
	ln, err := quic.ListenAddr("127.0.0.1:0", tc, &quic.Config{MaxIdleTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
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
