package relay

import (
	"crypto/tls"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/proxyproto"
)

// TestEveryRouteFeature runs each feature a route has once on every
// engine, each as a short subtest, so that a feature that works on one
// engine and not the other fails here by name. The tests beside it go
// into each feature's edges.
func TestEveryRouteFeature(t *testing.T) { forEachEngine(t, testEveryRouteFeature) }

func testEveryRouteFeature(t *testing.T) {
	for _, f := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"tcp-to-tcp", func(t *testing.T) { featureRelay(t, "tcp", "tcp4") }},
		{"tcp-to-unix", func(t *testing.T) { featureRelay(t, "tcp", "unix") }},
		{"unix-to-tcp", func(t *testing.T) { featureRelay(t, "unix", "tcp4") }},
		{"unix-to-unix", func(t *testing.T) { featureRelay(t, "unix", "unix") }},
		{"tcp6", func(t *testing.T) { featureRelay(t, "tcp6", "tcp6") }},
		{"balance/round-robin", featureRoundRobin},
		{"balance/least-conn", featureLeastConn},
		{"balance/client-hash", featureClientHash},
		{"health-check", featureHealthCheck},
		{"failover", featureFailover},
		{"acl/allow", func(t *testing.T) { featureACL(t, "127.0.0.0/8", "", true) }},
		{"acl/deny", func(t *testing.T) { featureACL(t, "", "127.0.0.1/32", false) }},
		{"max-conns", featureMaxConns},
		{"max-conns-per-client", featurePerClient},
		{"proxy-out/v1", func(t *testing.T) { featureProxyOut(t, 1) }},
		{"proxy-out/v2", func(t *testing.T) { featureProxyOut(t, 2) }},
		{"proxy-in/v1/trusted", func(t *testing.T) { featureProxyIn(t, 1, "127.0.0.0/8", "", true) }},
		{"proxy-in/v2/trusted", func(t *testing.T) { featureProxyIn(t, 2, "127.0.0.0/8", "", true) }},
		{"proxy-in/untrusted", func(t *testing.T) { featureProxyIn(t, 1, "10.0.0.0/8", "", false) }},
		{"proxy-in/acl-on-header-source", func(t *testing.T) { featureProxyIn(t, 2, "127.0.0.0/8", "192.0.2.0/24", false) }},
		{"sni-alpn", featureSNI},
		{"idle-timeout", featureIdleTimeout},
		{"half-close", featureHalfClose},
		{"keep-alive", featureKeepAlive},
		{"dial-timeout-never/localhost", featureNeverLocalhost},
		{"udp", featureUDP},
	} {
		t.Run(f.name, f.run)
	}
}

// featureRelay relays through a route listening on listen ("tcp",
// "tcp6" or "unix") to an echo target on network ("tcp4", "tcp6" or
// "unix").
func featureRelay(t *testing.T, listen, network string) {
	be := startBackend(t, network, echo)
	addr := "127.0.0.1:0"
	switch listen {
	case "unix":
		addr = filepath.Join(shortTempDir(t), "l.sock")
	case "tcp6":
		addr = "[::1]:0"
	}
	s := startRelay(t, route0(addr, be.addr, nil))
	c := dialRoute(t, s, "r")
	defer c.Close()
	if err := roundTrip(c, 300_000, 1); err != nil {
		t.Fatal(err)
	}
}

// pingClients runs n clients one after another, each a ping through
// route "r" of s.
func pingClients(t *testing.T, s *Server, n int) {
	t.Helper()
	for i := range n {
		c := dialRoute(t, s, "r")
		err := ping(c)
		c.Close()
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
}

// heldClient is a client of route "r" of s, relayed (a ping went through)
// and held open until the test ends.
func heldClient(t *testing.T, s *Server) net.Conn {
	t.Helper()
	c := dialRoute(t, s, "r")
	t.Cleanup(func() { c.Close() })
	if err := ping(c); err != nil {
		t.Fatal(err)
	}
	return c
}

func featureRoundRobin(t *testing.T) {
	a, b := startBackend(t, "tcp4", echo), startBackend(t, "tcp4", echo)
	s := startRelay(t, targetsRoute(nil, a.addr, b.addr))
	pingClients(t, s, 4)
	if n0, n1 := targetStats(s, 0).Connections, targetStats(s, 1).Connections; n0 != 2 || n1 != 2 {
		t.Errorf("targets took %d and %d of 4 clients, want 2 each", n0, n1)
	}
}

// With one client held on a target, least-conn gives the next to the
// other.
func featureLeastConn(t *testing.T) {
	a, b := startBackend(t, "tcp4", echo), startBackend(t, "tcp4", echo)
	s := startRelay(t, targetsRoute(func(r *Route) { r.Balance = LeastConn }, a.addr, b.addr))
	heldClient(t, s)
	heldClient(t, s)
	if n0, n1 := targetStats(s, 0).Active, targetStats(s, 1).Active; n0 != 1 || n1 != 1 {
		t.Errorf("targets hold %d and %d of 2 clients, want 1 each", n0, n1)
	}
}

// Every client of one address goes to one target.
func featureClientHash(t *testing.T) {
	a, b, c := startBackend(t, "tcp4", echo), startBackend(t, "tcp4", echo), startBackend(t, "tcp4", echo)
	s := startRelay(t, targetsRoute(func(r *Route) { r.Balance = ClientHash }, a.addr, b.addr, c.addr))
	pingClients(t, s, 6)
	var got []uint64
	for i := range 3 {
		got = append(got, targetStats(s, i).Connections)
	}
	if !(got[0] == 6 || got[1] == 6 || got[2] == 6) {
		t.Errorf("targets took %v of 6 clients of one address, want all on one", got)
	}
}

// Active checks mark a dead target down before any client tries it.
func featureHealthCheck(t *testing.T) {
	live := startBackend(t, "tcp4", echo)
	s := startRelay(t, targetsRoute(func(r *Route) {
		r.HealthCheck = HealthCheck{Interval: 20 * time.Millisecond, Timeout: time.Second, Rise: 1, Fall: 1}
	}, deadAddr(t), live.addr))
	waitFor(t, func() bool { return !targetStats(s, 0).Up })
	pingClients(t, s, 4)
	if st := s.Stats().Routes[0]; st.DialErrors != 0 || st.Targets[1].Connections != 4 {
		t.Errorf("%d dial errors, %d clients on the live target; want 0, 4", st.DialErrors, st.Targets[1].Connections)
	}
}

// A client whose target refuses is relayed by the next.
func featureFailover(t *testing.T) {
	live := startBackend(t, "tcp4", echo)
	s := startRelay(t, targetsRoute(nil, deadAddr(t), live.addr))
	pingClients(t, s, 4)
	if st := targetStats(s, 0); st.DialErrors == 0 || st.Up {
		t.Errorf("dead target: %d dial errors, up %v; want some, down", st.DialErrors, st.Up)
	}
}

func featureACL(t *testing.T, allow, deny string, ok bool) {
	be := startBackend(t, "tcp4", echo)
	s := startRelay(t, route0("127.0.0.1:0", be.addr, func(r *Route) {
		if allow != "" {
			r.Allow = []netip.Prefix{netip.MustParsePrefix(allow)}
		}
		if deny != "" {
			r.Deny = []netip.Prefix{netip.MustParsePrefix(deny)}
		}
	}))
	c := dialRoute(t, s, "r")
	defer c.Close()
	if err := ping(c); ok != (err == nil) {
		t.Fatalf("ping: %v, want ok=%v", err, ok)
	}
	if !ok {
		waitFor(t, func() bool { return s.Stats().Routes[0].Denied == 1 })
	}
}

// At MaxConns, accepting pauses and the next client waits in the backlog
// until a slot frees.
func featureMaxConns(t *testing.T) {
	be := startBackend(t, "tcp4", echo)
	s := startRelay(t, route0("127.0.0.1:0", be.addr, func(r *Route) { r.MaxConns = 1 }))
	first := heldClient(t, s)
	second := dialRoute(t, s, "r")
	defer second.Close()
	waitFor(t, func() bool { return s.Stats().Routes[0].AcceptPaused })
	first.Close()
	if err := ping(second); err != nil {
		t.Fatalf("after the slot freed: %v", err)
	}
}

// Over MaxConnsPerClient, a client's further connection is closed and
// counted; once its first ends, it may connect again.
func featurePerClient(t *testing.T) {
	be := startBackend(t, "tcp4", echo)
	s := startRelay(t, route0("127.0.0.1:0", be.addr, func(r *Route) { r.MaxConnsPerClient = 1 }))
	first := heldClient(t, s)
	second := dialRoute(t, s, "r")
	defer second.Close()
	if !waitClosed(second, 5*time.Second) {
		t.Fatal("second connection of one client not closed")
	}
	waitFor(t, func() bool { return s.Stats().Routes[0].OverLimit == 1 })
	first.Close()
	waitFor(t, func() bool { return s.Stats().Routes[0].Active == 0 })
	pingClients(t, s, 1)
}

func featureProxyOut(t *testing.T, v int) {
	b, got := proxyTarget(t)
	s := startRelay(t, route0("127.0.0.1:0", b.addr, func(r *Route) { r.SendProxy = v }))
	c := dialRoute(t, s, "r")
	defer c.Close()
	if err := ping(c); err != nil {
		t.Fatal(err)
	}
	if src := <-got; src.String() != c.LocalAddr().String() {
		t.Fatalf("target saw source %v, client is %v", src, c.LocalAddr())
	}
}

// A client sends a PROXY header (version v) naming another source: a
// trusted peer's header is believed, and passed on to the target (v2),
// and the access lists apply to the source it names.
func featureProxyIn(t *testing.T, v int, trusted, deny string, ok bool) {
	b, got := proxyTarget(t)
	s := startRelay(t, route0("127.0.0.1:0", b.addr, func(r *Route) {
		r.AcceptProxy, r.SendProxy = true, 2
		r.TrustedProxies = []netip.Prefix{netip.MustParsePrefix(trusted)}
		if deny != "" {
			r.Deny = []netip.Prefix{netip.MustParsePrefix(deny)}
		}
	}))
	c := dialRoute(t, s, "r")
	defer c.Close()
	src := netip.MustParseAddrPort("192.0.2.7:4242")
	dst := c.RemoteAddr().(*net.TCPAddr).AddrPort()
	hdr := proxyproto.AppendV1(nil, src, dst)
	if v == 2 {
		hdr = proxyproto.AppendV2(nil, proxyproto.Stream, src, dst)
	}
	if _, err := c.Write(hdr); err != nil {
		t.Fatal(err)
	}
	err := ping(c)
	if !ok {
		if err == nil {
			t.Fatal("relayed a client the route refuses")
		}
		waitFor(t, func() bool { return s.Stats().Routes[0].Denied == 1 })
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := <-got; got != src {
		t.Errorf("target saw source %v, the header named %v", got, src)
	}
}

// Two routes on one port told apart by the TLS ClientHello's server name
// and ALPN.
func featureSNI(t *testing.T) {
	listen := freePort(t)
	cfg, bs := sniRoutes(t, listen, nil)
	startRelay(t, cfg)
	tlsRoundTrip(t, listen, nil, &tls.Config{ServerName: "x.a.example", RootCAs: bs["a"].pool()}, bs["a"], 1000)
	want := bs["b-h2"]
	if p := tlsRoundTrip(t, listen, nil, &tls.Config{ServerName: "b.example", NextProtos: []string{"h2"}, RootCAs: want.pool()}, want, 1000); p != "h2" {
		t.Errorf("protocol %q, want h2", p)
	}
}

func featureIdleTimeout(t *testing.T) {
	be := startBackend(t, "tcp4", echo)
	s := startRelay(t, route0("127.0.0.1:0", be.addr, func(r *Route) { r.IdleTimeout = 100 * time.Millisecond }))
	c := dialRoute(t, s, "r")
	defer c.Close()
	if err := ping(c); err != nil {
		t.Fatal(err)
	}
	if !waitClosed(c, 5*time.Second) {
		t.Fatal("idle client not closed")
	}
	waitFor(t, func() bool { return s.Stats().Routes[0].IdleTimeouts == 1 })
}

// The client's end of writing reaches the target, whose answer, written
// after it, still reaches the client.
func featureHalfClose(t *testing.T) {
	be := startBackend(t, "tcp4", func(c net.Conn) {
		b, err := io.ReadAll(c)
		if err == nil {
			c.Write(append(b, " read to its end"...))
		}
	})
	s := startRelay(t, route0("127.0.0.1:0", be.addr, nil))
	c := dialRoute(t, s, "r")
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "request"); err != nil {
		t.Fatal(err)
	}
	if err := closeWrite(c); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(c); err != nil || string(b) != "request read to its end" {
		t.Fatalf("read %q, %v", b, err)
	}
}

func featureKeepAlive(t *testing.T) {
	be := startBackend(t, "tcp4", echo)
	s := startRelay(t, route0("127.0.0.1:0", be.addr, func(r *Route) { r.KeepAlive = 42 * time.Second }))
	checkSocketOptions(t, s, 1, 1, 42)
}

// dial_timeout never with a target named by host name: the name is
// resolved with no deadline, not an expired one.
func featureNeverLocalhost(t *testing.T) {
	be := startBackend(t, "tcp4", echo)
	_, port, _ := strings.Cut(be.addr.Address, ":")
	s := startRelay(t, route0("127.0.0.1:0", Addr{"tcp", "localhost:" + port}, func(r *Route) { r.DialTimeout = Never }))
	c := dialRoute(t, s, "r")
	defer c.Close()
	if err := roundTrip(c, 1000, 3); err != nil {
		t.Fatal(err)
	}
}

func featureUDP(t *testing.T) {
	e := udpEcho(t, "udp4", "127.0.0.1:0")
	s := startRelay(t, udpRoute0("127.0.0.1:0", e.LocalAddr(), nil))
	if got := askUDP(dialUDP(t, s.Addrs("u")[0].(*net.UDPAddr))); got != "who?" {
		t.Fatalf("echo %q", got)
	}
}
