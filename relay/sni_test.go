package relay

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/proxyproto"
	"github.com/zeroio/zeroio/internal/tlshello/hellotest"
)

// tlsBackend is a TLS echo server with a self-signed certificate of its
// own, for the names it serves.
type tlsBackend struct {
	name     string
	addr     Addr
	cert     *x509.Certificate
	accepted atomic.Int64
	mu       sync.Mutex
	proxied  []netip.AddrPort // sources of the PROXY headers it read
}

// startTLSBackend serves TLS for names (the first is its name), echoing
// what the client sends; with proxy, each connection starts with a PROXY
// header, read before the handshake.
func startTLSBackend(t *testing.T, proxy bool, names ...string) *tlsBackend {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	b := &tlsBackend{name: names[0], cert: cert}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos:   []string{"h2", "http/1.1"},
	}
	be := startBackend(t, "tcp4", func(c net.Conn) {
		b.accepted.Add(1)
		if proxy {
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			h, err := proxyproto.ReadHeader(c)
			if err != nil {
				return
			}
			c.SetReadDeadline(time.Time{})
			b.mu.Lock()
			b.proxied = append(b.proxied, h.Source)
			b.mu.Unlock()
		}
		tc := tls.Server(c, cfg)
		if tc.Handshake() != nil {
			return
		}
		io.Copy(tc, tc)
		tc.CloseWrite()
	})
	b.addr = be.addr
	return b
}

// pool trusts b's certificate alone.
func (b *tlsBackend) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(b.cert)
	return p
}

// freePort returns a loopback address with a port free now, for routes
// that must share one port (port 0 would give each its own).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// tlsRoundTrip connects to addr over raw (nil: a plain dial), does a TLS
// handshake with cfg, checks that the peer's certificate is want's own,
// and echoes size bytes through it. It returns the negotiated protocol.
func tlsRoundTrip(t *testing.T, addr string, raw net.Conn, cfg *tls.Config, want *tlsBackend, size int) string {
	t.Helper()
	if raw == nil {
		var err error
		if raw, err = net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(30 * time.Second))
	c := tls.Client(raw, cfg)
	if err := c.Handshake(); err != nil {
		t.Fatalf("%s %q: handshake: %v", cfg.ServerName, cfg.NextProtos, err)
	}
	st := c.ConnectionState()
	if !st.PeerCertificates[0].Equal(want.cert) {
		t.Fatalf("%s %q: certificate of %s, want %s's", cfg.ServerName, cfg.NextProtos, st.PeerCertificates[0].Subject.CommonName, want.name)
	}
	if err := roundTrip(c, size, uint64(size)); err != nil {
		t.Fatalf("%s: %v", cfg.ServerName, err)
	}
	return st.NegotiatedProtocol
}

// sniRoutes are four routes on one port, each to its own TLS backend.
func sniRoutes(t *testing.T, listen string, mod func(*Route)) (Config, map[string]*tlsBackend) {
	bs := map[string]*tlsBackend{
		"a":       startTLSBackend(t, false, "a.example", "*.a.example"),
		"b-h2":    startTLSBackend(t, false, "b.example"),
		"b":       startTLSBackend(t, false, "b.example"),
		"default": startTLSBackend(t, false, "default.example"),
	}
	l := Addr{Network: "tcp", Address: listen}
	routes := []Route{
		{Name: "a", Listen: l, Target: bs["a"].addr, SNI: []string{"a.example", "*.a.example"}},
		{Name: "b-h2", Listen: l, Target: bs["b-h2"].addr, SNI: []string{"b.example"}, ALPN: []string{"h2"}},
		{Name: "b", Listen: l, Target: bs["b"].addr, SNI: []string{"b.example"}},
		{Name: "default", Listen: l, Target: bs["default"].addr},
	}
	for i := range routes {
		if mod != nil {
			mod(&routes[i])
		}
	}
	return Config{Routes: routes}, bs
}

// TestSNIRouting: Go TLS clients reach the right one of several TLS
// backends on one port, by name and by ALPN, with the backend's own
// certificate and every byte intact.
func TestSNIRouting(t *testing.T) { forEachEngine(t, testSNIRouting) }

func testSNIRouting(t *testing.T) {
	leakCheck(t)
	listen := freePort(t)
	cfg, bs := sniRoutes(t, listen, nil)
	s := startRelay(t, cfg)
	for _, tc := range []struct {
		sni   string
		alpn  []string
		want  string
		proto string
	}{
		{"a.example", nil, "a", ""},
		{"x.A.example", nil, "a", ""},
		{"b.example", []string{"h2", "http/1.1"}, "b-h2", "h2"},
		{"b.example", []string{"http/1.1"}, "b", "http/1.1"},
		{"b.example", nil, "b", ""},
		{"other.example", []string{"h2"}, "default", "h2"},
	} {
		want := bs[tc.want]
		cfg := &tls.Config{ServerName: tc.sni, NextProtos: tc.alpn, RootCAs: want.pool()}
		if tc.want == "default" {
			// The default backend's certificate is for its own name:
			// check it by hand (tlsRoundTrip compares it).
			cfg.InsecureSkipVerify = true
		}
		if got := tlsRoundTrip(t, listen, nil, cfg, want, 200_000); got != tc.proto {
			t.Errorf("%s %q: protocol %q, want %q", tc.sni, tc.alpn, got, tc.proto)
		}
	}
	// No SNI at all (Go sends none for an IP address): the default.
	tlsRoundTrip(t, listen, nil, &tls.Config{ServerName: "127.0.0.1", InsecureSkipVerify: true}, bs["default"], 1000)

	st := s.Stats()
	for _, r := range st.Routes {
		if r.Name == "a" && r.Accepted != 2 || r.Name == "default" && r.Accepted != 2 {
			t.Errorf("route %s accepted %d", r.Name, r.Accepted)
		}
	}
	if len(st.Fronts) != 1 || len(st.Fronts[0].Routes) != 4 || st.Fronts[0].Unmatched != 0 {
		t.Errorf("fronts: %+v", st.Fronts)
	}
}

// oneByteConn writes every byte in a write of its own: with TCP_NODELAY,
// each leaves in a segment of its own.
type oneByteConn struct{ net.Conn }

func (c oneByteConn) Write(b []byte) (int, error) {
	for i := range b {
		if _, err := c.Conn.Write(b[i : i+1]); err != nil {
			return i, err
		}
	}
	return len(b), nil
}

// TestSNIHelloEdges: a hello one byte per segment routes; a stalled one is
// closed at the peek timeout; malformed and oversize ones, and a name with
// no route and no default, never reach a backend; each is counted.
func TestSNIHelloEdges(t *testing.T) { forEachEngine(t, testSNIHelloEdges) }

func testSNIHelloEdges(t *testing.T) {
	leakCheck(t)
	a := startTLSBackend(t, false, "a.example")
	listen := freePort(t)
	l := Addr{Network: "tcp", Address: listen}
	s := startRelay(t, Config{Routes: []Route{
		{Name: "a", Listen: l, Target: a.addr, SNI: []string{"a.example"}, PeekTimeout: 300 * time.Millisecond},
	}})
	dial := func() *net.TCPConn {
		c, err := net.DialTimeout("tcp", listen, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).SetNoDelay(true)
		return c.(*net.TCPConn)
	}

	raw := dial()
	tlsRoundTrip(t, listen, oneByteConn{raw}, &tls.Config{ServerName: "a.example", RootCAs: a.pool()}, a, 5000)

	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"stalled", []byte{22, 3, 1, 0, 200, 1, 0, 0}},
		{"malformed", []byte{22, 3, 1, 0, 6, 2, 0, 0, 2, 3, 3}},
		{"too large", []byte{22, 3, 1, 0x40, 0, 1, 0, 0xff, 0xff}},
		{"not tls", []byte("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n")},
		{"unknown name", hellotest.Build("b.example", nil)},
		{"no name", hellotest.Build("", []string{"h2"})},
	} {
		c := dial()
		if _, err := c.Write(tc.send); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !waitClosed(c, 10*time.Second) {
			t.Fatalf("%s: still open", tc.name)
		}
		c.Close()
	}
	if n := a.accepted.Load(); n != 1 {
		t.Errorf("backend accepted %d connections, want only the fragmented hello's", n)
	}
	f := s.Stats().Fronts[0]
	if f.HelloTimeouts != 1 || f.HelloMalformed != 1 || f.HelloTooLarge != 1 || f.Unmatched != 3 {
		t.Errorf("counters: %+v", f)
	}
}

// TestSNIProxyProtocol: a front that takes a PROXY header reads it before
// the hello, and the chosen route sends its own to the backend, naming the
// client the header named. A route's ACL applies after the match.
func TestSNIProxyProtocol(t *testing.T) { forEachEngine(t, testSNIProxyProtocol) }

func testSNIProxyProtocol(t *testing.T) {
	a := startTLSBackend(t, true, "a.example")
	b := startTLSBackend(t, true, "b.example")
	listen := freePort(t)
	l := Addr{Network: "tcp", Address: listen}
	s := startRelay(t, Config{Routes: []Route{
		{Name: "a", Listen: l, Target: a.addr, SNI: []string{"a.example"}, AcceptProxy: true, SendProxy: 2},
		{Name: "b", Listen: l, Target: b.addr, SNI: []string{"b.example"}, AcceptProxy: true, SendProxy: 1,
			Deny: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}},
	}})
	client := netip.MustParseAddrPort("198.51.100.7:4242")
	withHeader := func(src netip.AddrPort) net.Conn {
		c, err := net.DialTimeout("tcp", listen, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(proxyproto.AppendV1(nil, src, netip.MustParseAddrPort("203.0.113.1:443")))
		return c
	}
	tlsRoundTrip(t, listen, withHeader(client), &tls.Config{ServerName: "a.example", RootCAs: a.pool()}, a, 1000)
	tlsRoundTrip(t, listen, withHeader(client), &tls.Config{ServerName: "b.example", RootCAs: b.pool()}, b, 1000)
	for _, be := range []*tlsBackend{a, b} {
		be.mu.Lock()
		if len(be.proxied) != 1 || be.proxied[0] != client {
			t.Errorf("%s: PROXY sources %v, want %v", be.name, be.proxied, client)
		}
		be.mu.Unlock()
	}
	// Denied by b's ACL after the match: closed before any dial.
	c := withHeader(netip.MustParseAddrPort("192.0.2.9:1"))
	tc := tls.Client(c, &tls.Config{ServerName: "b.example", RootCAs: b.pool()})
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Error("denied client completed a handshake")
	}
	c.Close()
	for _, r := range s.Stats().Routes {
		if r.Name == "b" && r.Denied != 1 {
			t.Errorf("route b denied %d, want 1", r.Denied)
		}
	}
	if n := b.accepted.Load(); n != 1 {
		t.Errorf("b accepted %d", n)
	}
}

// TestSNIExternalClients: openssl s_client and curl reach the backend
// their name and ALPN choose.
func TestSNIExternalClients(t *testing.T) { forEachEngine(t, testSNIExternalClients) }

func testSNIExternalClients(t *testing.T) {
	listen := freePort(t)
	cfg, bs := sniRoutes(t, listen, nil)
	startRelay(t, cfg)
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Log("openssl not installed: skipping its part")
	} else {
		for _, tc := range []struct {
			name, alpn, want string
		}{{"x.a.example", "", "a"}, {"b.example", "h2", "b-h2"}, {"b.example", "http/1.1", "b"}, {"c.example", "", "default"}} {
			args := []string{"s_client", "-connect", listen, "-servername", tc.name, "-showcerts"}
			if tc.alpn != "" {
				args = append(args, "-alpn", tc.alpn)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			out, err := exec.CommandContext(ctx, "openssl", args...).CombinedOutput()
			cancel()
			if err != nil {
				t.Fatalf("openssl %q: %v\n%s", args, err, out)
			}
			if !bytes.Contains(out, []byte("CN=")) && !bytes.Contains(out, []byte("CN =")) {
				t.Fatalf("openssl: no certificate in\n%s", out)
			}
			if !certIs(out, bs[tc.want].name) {
				t.Errorf("openssl -servername %s -alpn %q: not %s's certificate:\n%s", tc.name, tc.alpn, bs[tc.want].name, out)
			}
		}
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	// curl speaks HTTP, which the echo backend answers with the request
	// itself: enough to see the connection reach it through TLS.
	_, port, _ := net.SplitHostPort(listen)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "curl", "-sv", "-k", "--http1.1", "--max-time", "5",
		"--resolve", "x.a.example:"+port+":127.0.0.1", "https://x.a.example:"+port+"/").CombinedOutput()
	if !bytes.Contains(out, []byte("CN=a.example")) && !bytes.Contains(out, []byte("CN = a.example")) {
		t.Errorf("curl: %v; not a.example's certificate:\n%s", err, out)
	}
}

// certIs reports whether openssl's output shows the certificate of name.
func certIs(out []byte, name string) bool {
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "subject=") || strings.Contains(l, "s:") {
			if strings.Contains(l, "CN="+name) || strings.Contains(l, "CN = "+name) {
				return true
			}
		}
	}
	return false
}
