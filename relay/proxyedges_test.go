package relay

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/proxyproto"
)

// v2WithTLV is a PROXY v2 header for src and dst carrying a NOOP TLV,
// which a reader must skip (the spec's PP2_TYPE_NOOP).
func v2WithTLV(src, dst netip.AddrPort) []byte {
	h := proxyproto.AppendV2(nil, proxyproto.Stream, src, dst)
	h = append(h, 0x04, 0, 3, 'a', 'b', 'c')
	binary.BigEndian.PutUint16(h[14:16], binary.BigEndian.Uint16(h[14:16])+6)
	return h
}

// v2Local is a PROXY v2 header of the LOCAL command (the proxy's own
// connection, a health check), with no addresses.
func v2Local() []byte {
	h := proxyproto.AppendV2(nil, proxyproto.Stream, netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("192.0.2.2:2"))
	h = h[:16]
	h[12], h[13], h[14], h[15] = 0x20, 0, 0, 0
	return h
}

// TestProxyHeaderArrivals: a PROXY header that comes one byte per segment,
// or in one write with the request and its EOF, is read whole, and not a
// byte of what follows it is lost, for v1, v2 and v2 with a TLV. Headers
// that name no client (v1 UNKNOWN, v2 LOCAL) leave the connection's own
// peer as the client.
func TestProxyHeaderArrivals(t *testing.T) { forEachEngine(t, testProxyHeaderArrivals) }

func testProxyHeaderArrivals(t *testing.T) {
	src := netip.MustParseAddrPort("203.0.113.7:5555")
	dst := netip.MustParseAddrPort("198.51.100.1:443")
	b, got := proxyTarget(t)
	s := startRelay(t, route0("127.0.0.1:0", b.addr, func(r *Route) { r.AcceptProxy, r.SendProxy = true, 1 }))
	for name, h := range map[string][]byte{
		"v1":         proxyproto.AppendV1(nil, src, dst),
		"v2":         proxyproto.AppendV2(nil, proxyproto.Stream, src, dst),
		"v2-tlv":     v2WithTLV(src, dst),
		"v1-unknown": []byte("PROXY UNKNOWN\r\n"),
		"v2-local":   v2Local(),
	} {
		req := bytes.Repeat([]byte(name), 1000)
		for _, how := range []string{"one-byte-segments", "with-request-and-eof"} {
			c := dialRoute(t, s, "r")
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if how == "one-byte-segments" {
				c.(*net.TCPConn).SetNoDelay(true)
				for i := range h {
					if _, err := c.Write(h[i : i+1]); err != nil {
						t.Fatal(err)
					}
					time.Sleep(time.Millisecond)
				}
				c.Write(req)
			} else {
				c.Write(append(append([]byte{}, h...), req...))
			}
			closeWrite(c)
			back, err := io.ReadAll(c)
			c.Close()
			if err != nil || !bytes.Equal(back, req) {
				t.Errorf("%s, %s: %d of %d bytes echoed, %v", name, how, len(back), len(req), err)
			}
			want := src
			if name == "v1-unknown" || name == "v2-local" {
				want = netip.MustParseAddrPort(c.LocalAddr().String())
			}
			if from := <-got; from != want {
				t.Errorf("%s, %s: target told the client is %v, want %v", name, how, from, want)
			}
		}
	}
}

// TestSNIAfterProxyHeader: on a front that takes a PROXY header, the header
// and the ClientHello in one write, or both one byte per segment, still
// route by the hello's name.
func TestSNIAfterProxyHeader(t *testing.T) { forEachEngine(t, testSNIAfterProxyHeader) }

func testSNIAfterProxyHeader(t *testing.T) {
	a := startTLSBackend(t, false, "a.example")
	d := startTLSBackend(t, false, "default.example")
	listen := freePort(t)
	l := Addr{Network: "tcp", Address: listen}
	startRelay(t, Config{Routes: []Route{
		{Name: "a", Listen: l, Target: a.addr, SNI: []string{"a.example"}, AcceptProxy: true},
		{Name: "default", Listen: l, Target: d.addr, AcceptProxy: true},
	}})
	h := v2WithTLV(netip.MustParseAddrPort("203.0.113.7:5555"), netip.MustParseAddrPort("198.51.100.1:443"))
	for _, split := range []bool{false, true} {
		raw, err := net.DialTimeout("tcp", listen, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var c net.Conn = &headerFirst{Conn: raw, header: h}
		if split {
			raw.(*net.TCPConn).SetNoDelay(true)
			if _, err := (oneByteConn{raw}).Write(h); err != nil {
				t.Fatal(err)
			}
			c = oneByteConn{raw}
		}
		tlsRoundTrip(t, listen, c, &tls.Config{ServerName: "a.example", RootCAs: a.pool()}, a, 3000)
	}
}

// headerFirst sends header in the same write as the first bytes written
// (the start of a ClientHello): one segment when they are small.
type headerFirst struct {
	net.Conn
	header []byte
}

func (c *headerFirst) Write(b []byte) (int, error) {
	if c.header != nil {
		h := c.header
		c.header = nil
		n, err := c.Conn.Write(append(append([]byte{}, h...), b...))
		return max(n-len(h), 0), err
	}
	return c.Conn.Write(b)
}

// TestSNIFailover: a route chosen by SNI whose first target is down gives
// the client to its next target, with the ClientHello already read from
// the client sent there whole (after the PROXY header the route sends).
func TestSNIFailover(t *testing.T) { forEachEngine(t, testSNIFailover) }

func testSNIFailover(t *testing.T) {
	leakCheck(t)
	a := startTLSBackend(t, true, "a.example")
	d := startTLSBackend(t, false, "default.example")
	listen := freePort(t)
	l := Addr{Network: "tcp", Address: listen}
	s := startRelay(t, Config{Routes: []Route{
		{Name: "a", Listen: l, SNI: []string{"a.example"}, SendProxy: 2,
			Targets: []Target{{Addr: deadAddr(t), Weight: 1}, {Addr: a.addr, Weight: 1}, {Addr: deadAddr(t), Weight: 1}}},
		{Name: "default", Listen: l, Target: d.addr},
	}})
	for range 6 {
		tlsRoundTrip(t, listen, nil, &tls.Config{ServerName: "a.example", RootCAs: a.pool()}, a, 20000)
	}
	for _, r := range s.Stats().Routes {
		if r.Name == "a" && (r.Accepted != 6 || r.DialErrors != 0) {
			t.Errorf("route a: %d accepted, %d clients failed", r.Accepted, r.DialErrors)
		}
	}
}

// TestBadProxyHeadersLogByEpisode: clients that send no valid PROXY
// header, on a route that takes one and on an address whose routes the
// hello tells apart, are counted each, but logged at info level as the
// connection-limit pauses are: the first in full, then a count every
// 30 s while they go on, not a line per client, which a flood of such
// clients would turn into a flood of lines.
func TestBadProxyHeadersLogByEpisode(t *testing.T) { forEachEngine(t, testBadProxyHeadersLogByEpisode) }

func testBadProxyHeadersLogByEpisode(t *testing.T) {
	b := startBackend(t, "tcp4", echo)
	var buf syncBuffer
	listen := freePort(t)
	l := Addr{Network: "tcp", Address: listen}
	s := startRelay(t, Config{
		Logger: slog.New(slog.NewTextHandler(&buf, nil)),
		Routes: []Route{
			{Name: "p", Listen: Addr{Network: "tcp", Address: "127.0.0.1:0"}, Target: b.addr, AcceptProxy: true},
			{Name: "a", Listen: l, Target: b.addr, SNI: []string{"a.example"}, AcceptProxy: true},
			{Name: "default", Listen: l, Target: b.addr, AcceptProxy: true},
		},
	})
	const n = 20
	for _, addr := range []string{s.Addrs("p")[0].String(), listen} {
		for range n {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, "GET / HTTP/1.0\r\n\r\n")
			if !waitClosed(c, 5*time.Second) {
				t.Fatal("a client without a PROXY header kept open")
			}
			c.Close()
		}
	}
	waitFor(t, func() bool {
		st := s.Stats()
		var route uint64
		for _, r := range st.Routes {
			route += r.ProxyHeaderErrors
		}
		var front uint64
		for _, f := range st.Fronts {
			front += f.ProxyHeaderErrors
		}
		return route == n && front == n
	})
	if got := strings.Count(buf.String(), `msg="bad PROXY header"`); got != 2 {
		t.Errorf("%d lines for %d bad PROXY headers, want one per route and address:\n%s", got, 2*n, buf.String())
	}
}

// TestProxyHeaderMappedSource: a PROXY header's v4-mapped client (TCP6
// ::ffff:10.1.1.2, from a proxy's dual-stack socket) is the IPv4 client
// 10.1.1.2: with MaxConnsPerClient 1 it may not hold a second connection
// by arriving in the other family, and it is logged and sent on as IPv4.
func TestProxyHeaderMappedSource(t *testing.T) { forEachEngine(t, testProxyHeaderMappedSource) }

func testProxyHeaderMappedSource(t *testing.T) {
	got := make(chan string, 2)
	b := startBackend(t, "tcp4", func(c net.Conn) {
		buf := make([]byte, 256)
		n, _ := c.Read(buf)
		line, _, _ := strings.Cut(string(buf[:n]), "\r\n")
		got <- line
		io.Copy(io.Discard, c)
	})
	var logs syncBuffer
	cfg := route0("127.0.0.1:0", b.addr, func(r *Route) {
		r.AcceptProxy, r.SendProxy, r.MaxConnsPerClient = true, 1, 1
	})
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.ConnLog = slog.LevelInfo
	s := startRelay(t, cfg)
	first := dialRoute(t, s, "r")
	defer first.Close()
	io.WriteString(first, "PROXY TCP6 ::ffff:10.1.1.2 ::ffff:127.0.0.1 5555 80\r\nx")
	if line := <-got; line != "PROXY TCP4 10.1.1.2 127.0.0.1 5555 80" {
		t.Errorf("header sent on: %q", line)
	}
	second := dialRoute(t, s, "r")
	defer second.Close()
	io.WriteString(second, "PROXY TCP4 10.1.1.2 127.0.0.1 5556 80\r\nx")
	if !waitClosed(second, 5*time.Second) {
		t.Fatal("the same client's second connection, over its limit, is still open")
	}
	if st := s.Stats().Routes[0]; st.OverLimit != 1 {
		t.Errorf("OverLimit %d, want 1", st.OverLimit)
	}
	first.Close()
	waitFor(t, func() bool { return strings.Contains(logs.String(), "msg=connection") })
	if !strings.Contains(logs.String(), "client=10.1.1.2:5555") {
		t.Errorf("connection log: %s", logs.String())
	}
}
