package relay

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/zeroio/zeroio/internal/proxyproto"
)

// udpProxyTarget answers each datagram with the PROXY v2 header it starts
// with, as "src dst transport|payload", or "no header: err".
func udpProxyTarget(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	serveUDP(t, c, func(in []byte) []byte {
		h, n, err := proxyproto.Parse(in)
		if err != nil {
			return []byte("no header: " + err.Error())
		}
		return fmt.Appendf(nil, "%v %v %d|%s", h.Source, h.Destination, h.Transport, in[n:])
	})
	return c
}

// TestUDPSendProxy: every datagram to the target starts with a v2 DGRAM
// header naming the client and the address it sent to.
func TestUDPSendProxy(t *testing.T) {
	leakCheck(t)
	tg := udpProxyTarget(t)
	s := startRelay(t, udpRoute0("127.0.0.1:0", tg.LocalAddr(), func(r *Route) { r.SendProxy = 2 }))
	ra := s.Addrs("u")[0].(*net.UDPAddr)
	c := dialUDP(t, ra)
	for i := range 20 {
		msg := fmt.Sprintf("datagram %d", i)
		got := string(exchange(t, c, []byte(msg)))
		want := fmt.Sprintf("%v %v 2|%s", c.LocalAddr().(*net.UDPAddr).AddrPort(), ra.AddrPort(), msg)
		if got != want {
			t.Fatalf("target saw %q, want %q", got, want)
		}
	}
}

// TestUDPAcceptProxy: datagrams from a proxy in front carry a v2 header;
// the relay reads the client from it (access lists see that client),
// strips it, sends its own to the target, and replies to the proxy.
func TestUDPAcceptProxy(t *testing.T) {
	leakCheck(t)
	tg := udpProxyTarget(t)
	s := startRelay(t, udpRoute0("127.0.0.1:0", tg.LocalAddr(), func(r *Route) {
		r.AcceptProxy, r.SendProxy = true, 2
		r.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		r.Deny = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	}))
	ra := s.Addrs("u")[0].(*net.UDPAddr)
	proxy := dialUDP(t, ra)
	client := netip.MustParseAddrPort("192.0.2.7:4444")
	orig := netip.MustParseAddrPort("203.0.113.1:53")
	for _, p := range []string{"one", "two"} {
		dg := append(proxyproto.AppendV2(nil, proxyproto.Datagram, client, orig), p...)
		if got, want := string(exchange(t, proxy, dg)), fmt.Sprintf("%v %v 2|%s", client, orig, p); got != want {
			t.Fatalf("target saw %q, want %q", got, want)
		}
	}
	// Two clients through the same proxy socket are two sessions.
	other := netip.MustParseAddrPort("192.0.2.8:4444")
	dg := append(proxyproto.AppendV2(nil, proxyproto.Datagram, other, orig), "three"...)
	if got := string(exchange(t, proxy, dg)); !strings.HasPrefix(got, other.String()) {
		t.Fatalf("second client: target saw %q", got)
	}
	if st := s.Stats().Routes[0]; st.SessionsTotal != 2 {
		t.Fatalf("%d sessions, want 2", st.SessionsTotal)
	}

	// Dropped and counted: no header, a v1 header, a denied client.
	for _, dg := range [][]byte{
		[]byte("no header at all"),
		[]byte("PROXY TCP4 192.0.2.7 203.0.113.1 4444 53\r\nx"),
		append(proxyproto.AppendV2(nil, proxyproto.Datagram, netip.MustParseAddrPort("198.51.100.1:1"), orig), "denied"...),
	} {
		if _, err := proxy.Write(dg); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool {
		st := s.Stats().Routes[0]
		return st.ProxyHeaderErrors == 2 && st.Denied == 1
	})
	if st := s.Stats().Routes[0]; st.SessionsTotal != 2 {
		t.Fatalf("%d sessions after bad datagrams, want 2", st.SessionsTotal)
	}
}

// TestUDPAcceptProxyUntrusted: a sender outside the trusted proxies is
// dropped, its header unread.
func TestUDPAcceptProxyUntrusted(t *testing.T) {
	leakCheck(t)
	tg := udpProxyTarget(t)
	s := startRelay(t, udpRoute0("127.0.0.1:0", tg.LocalAddr(), func(r *Route) {
		r.AcceptProxy = true
		r.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	}))
	c := dialUDP(t, s.Addrs("u")[0].(*net.UDPAddr))
	dg := append(proxyproto.AppendV2(nil, proxyproto.Datagram, netip.MustParseAddrPort("192.0.2.7:1"), netip.MustParseAddrPort("192.0.2.1:2")), "x"...)
	if _, err := c.Write(dg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return s.Stats().Routes[0].Denied == 1 })
	if st := s.Stats().Routes[0]; st.SessionsTotal != 0 {
		t.Fatalf("%d sessions, want 0", st.SessionsTotal)
	}
}

func TestUDPProxyV1Refused(t *testing.T) {
	_, err := New(udpRoute0("127.0.0.1:0", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, func(r *Route) { r.SendProxy = 1 }))
	if err == nil || !strings.Contains(err.Error(), "v1 has no datagram form") {
		t.Fatalf("send_proxy 1 on a UDP route: %v", err)
	}
}
