package interop

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/zeroio/zeroio/relay"
)

// TestQUICRoutedBySNI: quic-go servers with certificates of their own sit
// behind one UDP port of the relay, which routes each quic-go client by
// the server name (and ALPN) of its ClientHello: every connection
// completes its handshake against the one server trusted for the name it
// asked, and echoes through it. quic-go's hello with a post-quantum key
// share spans two datagrams, which the relay holds until the hello is
// whole, in whatever order they come. A client that is not QUIC reaches
// the route without a name.
func TestQUICRoutedBySNI(t *testing.T) {
	type server struct {
		name, alpn string
		roots      *x509.CertPool
		route      relay.Route
	}
	var servers []*server
	for _, s := range []struct{ name, alpn string }{{"a.example", "echo"}, {"b.example", "echo"}, {"b.example", "h3x"}} {
		tc, roots := selfSigned(t, s.name)
		tc.NextProtos = []string{s.alpn}
		ln := quicEcho(t, tc)
		r := relay.Route{Name: fmt.Sprintf("%s-%s", s.name, s.alpn), Listen: relay.Addr{Network: "udp", Address: "127.0.0.1:0"},
			Target: relay.Addr{Network: "udp", Address: ln.Addr().String()}, SNI: []string{s.name}}
		if s.alpn != "echo" {
			r.ALPN = []string{s.alpn}
		}
		servers = append(servers, &server{s.name, s.alpn, roots, r})
	}
	plain := listenUDP(t)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := plain.ReadFromUDP(buf)
			if err != nil {
				return
			}
			plain.WriteToUDP(append([]byte("plain:"), buf[:n]...), from)
		}
	}()
	free, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	port := free.LocalAddr().String() // a free port, for every route
	free.Close()
	routes := []relay.Route{{Name: "default", Listen: relay.Addr{Network: "udp", Address: port}, Target: relay.Addr{Network: "udp", Address: plain.LocalAddr().String()}}}
	for _, s := range servers {
		s.route.Listen.Address = port
		routes = append(routes, s.route)
	}
	srv, err := relay.New(relay.Config{Routes: routes})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ra := srv.Addrs("default")[0].String()

	const rounds = 6
	var wg sync.WaitGroup
	errs := make(chan error, rounds*len(servers))
	for i := range rounds {
		for _, s := range servers {
			wg.Go(func() {
				if err := namedEcho(ra, s.name, s.alpn, s.roots, byte(i)); err != nil {
					errs <- fmt.Errorf("%s %s, round %d: %w", s.name, s.alpn, i, err)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	c, err := net.Dial("udp", ra)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("hi"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "plain:hi" {
		t.Fatalf("client that is not QUIC: %q %v", buf[:n], err)
	}
	st := srv.Stats()
	if len(st.Fronts) != 1 || st.Fronts[0].UDP == nil || st.Fronts[0].UDP.NotQUIC != 1 || st.Fronts[0].Unmatched != 0 {
		t.Fatalf("fronts %+v", st.Fronts)
	}
	for _, r := range st.Routes {
		if r.Name != "default" && r.SessionsTotal != rounds {
			t.Errorf("route %s: %d sessions, want %d", r.Name, r.SessionsTotal, rounds)
		}
	}
}

// namedEcho dials the relay at addr for name with alpn, trusting only
// roots (one server's certificate), and echoes a little data.
func namedEcho(addr, name, alpn string, roots *x509.CertPool, seed byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := quic.DialAddr(ctx, addr, &tls.Config{RootCAs: roots, ServerName: name, NextProtos: []string{alpn}},
		&quic.Config{MaxIdleTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer c.CloseWithError(0, "")
	if p := c.ConnectionState().TLS.NegotiatedProtocol; p != alpn {
		return fmt.Errorf("negotiated %q", p)
	}
	s, err := c.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i*13) ^ seed
	}
	want := sha256.Sum256(data)
	go func() { s.Write(data); s.Close() }()
	h := sha256.New()
	if n, err := io.Copy(h, s); err != nil || n != int64(len(data)) || [32]byte(h.Sum(nil)) != want {
		return fmt.Errorf("echo: %d bytes, %v", n, err)
	}
	return nil
}
