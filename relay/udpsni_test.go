package relay

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/proxyproto"
	"github.com/zeroio/zeroio/internal/quichello"
	"github.com/zeroio/zeroio/internal/quiclb"
	"github.com/zeroio/zeroio/internal/quictest"
)

// quicInitials returns a QUIC client's first flight as datagrams: a real
// ClientHello from crypto/tls naming name and offering alpn, carried in
// parts Initial packets of version, one a datagram, padded as a client
// pads them.
func quicInitials(t *testing.T, version uint32, name string, alpn []string, parts int) [][]byte {
	t.Helper()
	hello, err := quictest.ClientHello(name, alpn...)
	if err != nil {
		t.Fatal(err)
	}
	dcid, scid := make([]byte, 8), make([]byte, 8)
	rand.Read(dcid)
	rand.Read(scid)
	chunk := (len(hello) + parts - 1) / parts
	var out [][]byte
	for off, pn := 0, 0; off < len(hello); off, pn = off+chunk, pn+1 {
		end := min(off+chunk, len(hello))
		pkt, err := quichello.SealInitial(version, dcid, scid, uint32(pn), quichello.AppendCrypto(nil, off, hello[off:end]), 1200)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pkt)
	}
	return out
}

// recTarget is a UDP target that keeps every datagram it receives, by
// the port it came from (a session's upstream socket), and answers each
// with its tag and that port.
type recTarget struct {
	*net.UDPConn
	tag string
	mu  sync.Mutex
	got map[uint16][][]byte
}

func newRecTarget(t *testing.T, tag string) *recTarget {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	rt := &recTarget{UDPConn: c, tag: tag, got: map[uint16][][]byte{}}
	serveUDPFrom(t, c, func(in []byte, from netip.AddrPort) []byte {
		rt.mu.Lock()
		rt.got[from.Port()] = append(rt.got[from.Port()], bytes.Clone(in))
		rt.mu.Unlock()
		return fmt.Appendf(nil, "%s:%d", tag, from.Port())
	})
	return rt
}

func (rt *recTarget) addr() Addr { return Addr{"udp", rt.LocalAddr().String()} }

// has reports whether rt received want from one session, first, in this
// order, one after another.
func (rt *recTarget) has(want [][]byte) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, got := range rt.got {
		if len(got) >= len(want) && slices.EqualFunc(got[:len(want)], want, bytes.Equal) {
			return true
		}
	}
	return false
}

// eventually reports whether rt has received want (see has) within a
// few seconds.
func (rt *recTarget) eventually(want [][]byte) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if rt.has(want) {
			return true
		}
	}
	return false
}

// sendAll sends dgs from c in order and returns the first reply, after
// dropping those that answered earlier datagrams.
func sendAll(t *testing.T, c *net.UDPConn, dgs [][]byte) string {
	t.Helper()
	buf := make([]byte, 256)
	c.SetReadDeadline(time.Now())
	for {
		if _, err := c.Read(buf); err != nil {
			break
		}
	}
	for _, d := range dgs {
		if _, err := c.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

func sniRoute(name string, tg *recTarget, sni, alpn []string) Route {
	return Route{Name: name, Listen: Addr{"udp", "127.0.0.1:0"}, Target: tg.addr(), SNI: sni, ALPN: alpn}
}

// sharedUDP starts a relay whose routes all listen on one free port.
func sharedUDP(t *testing.T, routes ...Route) (*Server, *net.UDPAddr) {
	t.Helper()
	la := freeUDPPort(t)
	for i := range routes {
		routes[i].Listen.Address = la.String()
	}
	s := startRelay(t, Config{Routes: routes})
	return s, s.Addrs(routes[0].Name)[0].(*net.UDPAddr)
}

// TestUDPRoutesBySNI: QUIC clients of one UDP address reach the route
// their ClientHello names, by server name and ALPN, whether the hello
// takes one datagram or two arriving out of order, in QUIC version 1 or
// 2; the target receives every datagram held for the choice, in the
// order sent. A client that is not QUIC, or names no route, goes to the
// default route; an established client costs no second choice.
func TestUDPRoutesBySNI(t *testing.T) {
	leakCheck(t)
	a, b, h3, def := newRecTarget(t, "A"), newRecTarget(t, "B"), newRecTarget(t, "H3"), newRecTarget(t, "D")
	s, ra := sharedUDP(t,
		sniRoute("a", a, []string{"a.example"}, nil),
		sniRoute("b", b, []string{"*.b.example"}, nil),
		sniRoute("b-h3", h3, []string{"*.b.example"}, []string{"h3"}),
		sniRoute("default", def, nil, nil))

	for _, c := range []struct {
		name    string
		version uint32
		sni     string
		alpn    []string
		parts   int
		reverse bool
		want    *recTarget
	}{
		{"one datagram", quichello.Version1, "a.example", nil, 1, false, a},
		{"two datagrams", quichello.Version1, "x.b.example", []string{"h2"}, 2, false, b},
		{"two datagrams out of order", quichello.Version1, "y.b.example", nil, 2, true, b},
		{"alpn", quichello.Version1, "z.b.example", []string{"hq", "h3"}, 2, true, h3},
		{"version 2", quichello.Version2, "A.Example", nil, 3, true, a},
		{"no route names it", quichello.Version1, "c.example", nil, 1, false, def},
	} {
		dgs := quicInitials(t, c.version, c.sni, c.alpn, c.parts)
		if c.reverse {
			for i, j := 0, len(dgs)-1; i < j; i, j = i+1, j-1 {
				dgs[i], dgs[j] = dgs[j], dgs[i]
			}
		}
		cl := dialUDP(t, ra)
		got := sendAll(t, cl, dgs)
		if !strings.HasPrefix(got, c.want.tag+":") {
			t.Fatalf("%s: reply %q, want one from %s", c.name, got, c.want.tag)
		}
		if !c.want.eventually(dgs) {
			t.Fatalf("%s: target %s did not receive the %d datagrams in the order sent", c.name, c.want.tag, len(dgs))
		}
		// The session is found by address now: a short-header packet
		// goes the same way.
		if again := sendAll(t, cl, [][]byte{quicShort([]byte("whatever"), "x")}); again != got {
			t.Fatalf("%s: next datagram answered %q, then %q", c.name, got, again)
		}
	}
	cl := dialUDP(t, ra)
	if got := sendAll(t, cl, [][]byte{[]byte("plain")}); !strings.HasPrefix(got, "D:") {
		t.Fatalf("client that is not QUIC: reply %q", got)
	}
	st := frontStats(t, s)
	if st.UDP.NotQUIC != 1 || st.Unmatched != 0 || st.UDP.Dropped != 0 || st.UDP.Held != 0 || len(st.Routes) != 4 {
		t.Fatalf("front stats %+v %+v", st, *st.UDP)
	}
}

// frontStats returns the relay's one front's counters.
func frontStats(t *testing.T, s *Server) FrontStats {
	t.Helper()
	fs := s.Stats().Fronts
	if len(fs) != 1 || fs[0].UDP == nil {
		t.Fatalf("fronts %+v", fs)
	}
	return fs[0]
}

// TestUDPSNIWithoutDefault: on an address without a default route, a
// client that is not QUIC, and one whose hello no route takes, are
// dropped and counted; a client whose hello never completes is held no
// longer than holdTimeout, then dropped, and a client with a route gets
// through meanwhile.
func TestUDPSNIWithoutDefault(t *testing.T) {
	leakCheck(t)
	old := holdTimeout
	holdTimeout = 200 * time.Millisecond
	t.Cleanup(func() { holdTimeout = old })
	a := newRecTarget(t, "A")
	s, ra := sharedUDP(t, sniRoute("a", a, []string{"a.example"}, nil))

	half := dialUDP(t, ra)
	if _, err := half.Write(quicInitials(t, quichello.Version1, "a.example", nil, 2)[1]); err != nil {
		t.Fatal(err)
	}
	plain := dialUDP(t, ra)
	plain.Write([]byte("plain"))
	other := dialUDP(t, ra)
	other.Write(quicInitials(t, quichello.Version1, "c.example", nil, 1)[0])
	if got := sendAll(t, dialUDP(t, ra), quicInitials(t, quichello.Version1, "a.example", nil, 2)); !strings.HasPrefix(got, "A:") {
		t.Fatalf("client of route a: reply %q", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := frontStats(t, s)
		u := st.UDP
		if u.NotQUIC == 1 && st.Unmatched == 1 && u.HelloTimeouts == 1 && u.Dropped == 3 && u.Held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("front stats %+v %+v", st, *u)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := s.Stats().Routes[0]; r.SessionsTotal != 1 {
		t.Fatalf("route a opened %d sessions, want 1", r.SessionsTotal)
	}
}

// TestUDPSNIHeldTimesOutToDefault: a client whose hello is still
// incomplete after holdTimeout goes to the default route with what it
// sent.
func TestUDPSNIHeldTimesOutToDefault(t *testing.T) {
	leakCheck(t)
	old := holdTimeout
	holdTimeout = 100 * time.Millisecond
	t.Cleanup(func() { holdTimeout = old })
	a, def := newRecTarget(t, "A"), newRecTarget(t, "D")
	s, ra := sharedUDP(t, sniRoute("a", a, []string{"a.example"}, nil), sniRoute("d", def, nil, nil))
	first := quicInitials(t, quichello.Version1, "a.example", nil, 2)[:1]
	if got := sendAll(t, dialUDP(t, ra), first); !strings.HasPrefix(got, "D:") {
		t.Fatalf("reply %q, want the default route's", got)
	}
	if !def.eventually(first) {
		t.Fatal("the held datagram did not reach the default route")
	}
	if u := frontStats(t, s).UDP; u.HelloTimeouts != 1 {
		t.Fatalf("stats %+v", *u)
	}
}

// TestUDPSharedReload: routes join and leave a shared UDP address, and
// the address becomes shared and stops being so, while a client's
// session on a route that stays goes on through every reload (the same
// upstream socket answers it).
func TestUDPSharedReload(t *testing.T) {
	leakCheck(t)
	a, b, def := newRecTarget(t, "A"), newRecTarget(t, "B"), newRecTarget(t, "D")
	la := freeUDPPort(t)
	at := func(rs ...Route) Config {
		for i := range rs {
			rs[i].Listen.Address = la.String()
		}
		return Config{Routes: rs}
	}
	routeD := sniRoute("d", def, nil, nil)
	routeA := sniRoute("a", a, []string{"a.example"}, nil)
	routeB := sniRoute("b", b, []string{"b.example"}, nil)
	s := startRelay(t, at(routeD))
	ra := s.Addrs("d")[0].(*net.UDPAddr)
	plain := dialUDP(t, ra)
	first := sendAll(t, plain, [][]byte{[]byte("plain")})
	if !strings.HasPrefix(first, "D:") {
		t.Fatalf("reply %q", first)
	}
	qa := dialUDP(t, ra)
	var qaFirst string
	for i, cfg := range []Config{at(routeD, routeA), at(routeD, routeA, routeB), at(routeA, routeD), at(routeD)} {
		if err := s.Update(cfg); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		if got := sendAll(t, plain, [][]byte{[]byte("plain")}); got != first {
			t.Fatalf("reload %d: reply %q, want %q from the same session", i, got, first)
		}
		if s.Addrs("d")[0].String() != ra.String() {
			t.Fatalf("reload %d: listens on %v", i, s.Addrs("d"))
		}
		switch i {
		case 0:
			qaFirst = sendAll(t, qa, quicInitials(t, quichello.Version1, "a.example", nil, 2))
			if !strings.HasPrefix(qaFirst, "A:") {
				t.Fatalf("reply %q", qaFirst)
			}
		case 1, 2:
			if got := sendAll(t, qa, [][]byte{quicShort([]byte("whatever"), "x")}); got != qaFirst {
				t.Fatalf("reload %d: QUIC client's reply %q, want %q", i, got, qaFirst)
			}
		}
		if i == 1 {
			if got := sendAll(t, dialUDP(t, ra), quicInitials(t, quichello.Version1, "b.example", nil, 1)); !strings.HasPrefix(got, "B:") {
				t.Fatalf("route b added: reply %q", got)
			}
		}
	}
	if st := s.Stats(); len(st.Fronts) != 0 || st.Routes[0].SessionsTotal != 1 {
		t.Fatalf("after the last reload: %+v", st)
	}
}

// TestUDPSharedConfig: routes sharing a UDP address must agree on the
// settings of its sockets, and must not match the same client equally.
func TestUDPSharedConfig(t *testing.T) {
	tg := Addr{"udp", "127.0.0.1:9"}
	for _, c := range []struct {
		b    func(*Route)
		want string
	}{
		{func(r *Route) { r.Workers = 2 }, "differ in workers"},
		{func(r *Route) { r.UDPBuffer = 1 << 20 }, "differ in udp_buffer"},
		{func(r *Route) { r.SNI = nil }, "can match the same client"},
	} {
		ra := Route{Name: "a", Listen: Addr{"udp", "127.0.0.1:4433"}, Target: tg}
		rb := Route{Name: "b", Listen: ra.Listen, Target: tg, SNI: []string{"b.example"}}
		c.b(&rb)
		_, err := New(Config{Routes: []Route{ra, rb}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want %q, got %v", c.want, err)
		}
	}
}

// TestUDPSNIBounds: a client whose hello takes more datagrams than are
// held goes to the default route with every datagram it sent, in order.
func TestUDPSNIBounds(t *testing.T) {
	leakCheck(t)
	a, def := newRecTarget(t, "A"), newRecTarget(t, "D")
	s, ra := sharedUDP(t, sniRoute("a", a, []string{"a.example"}, nil), sniRoute("d", def, nil, nil))
	dgs := quicInitials(t, quichello.Version1, "a.example", nil, holdDatagrams+1)
	if got := sendAll(t, dialUDP(t, ra), dgs); !strings.HasPrefix(got, "D:") {
		t.Fatalf("reply %q, want the default route's", got)
	}
	if !def.eventually(dgs) {
		t.Fatal("the default route did not receive every datagram in order")
	}
	if u := frontStats(t, s).UDP; u.TooLarge != 1 || u.Held != 0 {
		t.Fatalf("stats %+v", *u)
	}
}

// TestUDPSNIAcceptProxy: on a shared address that takes PROXY headers,
// the hello is read after each datagram's header, and the route chosen
// receives the datagrams without it; a datagram without a header is
// dropped and counted on the address.
func TestUDPSNIAcceptProxy(t *testing.T) {
	leakCheck(t)
	a, def := newRecTarget(t, "A"), newRecTarget(t, "D")
	proxied := func(r Route) Route {
		r.AcceptProxy, r.TrustedProxies = true, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		return r
	}
	s, ra := sharedUDP(t, proxied(sniRoute("a", a, []string{"a.example"}, nil)), proxied(sniRoute("d", def, nil, nil)))
	hdr := proxyproto.AppendV2(nil, proxyproto.Datagram, netip.MustParseAddrPort("192.0.2.7:4444"), netip.MustParseAddrPort("203.0.113.1:443"))
	dgs := quicInitials(t, quichello.Version1, "a.example", nil, 2)
	var sent [][]byte
	for _, d := range dgs {
		sent = append(sent, append(append([]byte(nil), hdr...), d...))
	}
	proxy := dialUDP(t, ra)
	if got := sendAll(t, proxy, sent); !strings.HasPrefix(got, "A:") {
		t.Fatalf("reply %q", got)
	}
	if !a.eventually(dgs) {
		t.Fatal("route a did not receive the datagrams without their header")
	}
	proxy.Write([]byte("no header"))
	waitFor(t, func() bool { return frontStats(t, s).ProxyHeaderErrors == 1 })
}

// TestUDPSharedWorkers: a shared address with several sockets, whose
// number a reload changes, keeps its clients' sessions.
func TestUDPSharedWorkers(t *testing.T) {
	leakCheck(t)
	a, def := newRecTarget(t, "A"), newRecTarget(t, "D")
	la := freeUDPPort(t)
	at := func(workers int) Config {
		rs := []Route{sniRoute("a", a, []string{"a.example"}, nil), sniRoute("d", def, nil, nil)}
		for i := range rs {
			rs[i].Listen.Address, rs[i].Workers = la.String(), workers
		}
		return Config{Routes: rs}
	}
	s := startRelay(t, at(2))
	ra := s.Addrs("a")[0].(*net.UDPAddr)
	if n := len(s.Addrs("a")); n != 2 {
		t.Fatalf("%d sockets, want 2", n)
	}
	var clients []*net.UDPConn
	var first []string
	for range 4 {
		c := dialUDP(t, ra)
		got := sendAll(t, c, quicInitials(t, quichello.Version1, "a.example", nil, 2))
		if !strings.HasPrefix(got, "A:") {
			t.Fatalf("reply %q", got)
		}
		clients, first = append(clients, c), append(first, got)
	}
	for _, w := range []int{3, 1} {
		if err := s.Update(at(w)); err != nil {
			t.Fatalf("workers %d: %v", w, err)
		}
		if n := len(s.Addrs("d")); n != w {
			t.Fatalf("%d sockets, want %d", n, w)
		}
		for i, c := range clients {
			if got := sendAll(t, c, [][]byte{quicShort([]byte("whatever"), "x")}); got != first[i] {
				t.Fatalf("workers %d, client %d: reply %q, want %q", w, i, got, first[i])
			}
		}
	}
}

// TestUDPSNIServerID: on a shared address, a client the relay has never
// seen, sending to a connection ID that carries the server ID of one of a
// route's targets (it migrated to a new path and a new ID), reaches that
// target, though its route is not the default.
func TestUDPSNIServerID(t *testing.T) {
	leakCheck(t)
	lb := quiclb.Config{ConfigID: 1, ServerIDLen: 2, NonceLen: 5}
	id, err := lb.Encode(make([]byte, lb.CIDLen()), []byte("AA"), []byte("aaaaa"))
	if err != nil {
		t.Fatal(err)
	}
	a, def := quicTarget(t, id), newRecTarget(t, "D")
	ta := Addr{"udp", a.LocalAddr().String()}
	r := Route{Name: "a", Listen: Addr{"udp", "127.0.0.1:0"}, Target: ta, SNI: []string{"a.example"},
		QUICLB: &QUICLB{ConfigID: 1, ServerIDLen: 2, NonceLen: 5, Servers: []QUICServer{{ta, []byte("AA")}}}}
	_, ra := sharedUDP(t, r, sniRoute("d", def, nil, nil))
	if got, want := string(exchange(t, dialUDP(t, ra), quicShort(id, "hi"))), string(id)+":hi"; got != want {
		t.Fatalf("reply %q, want %q", got, want)
	}
}

// TestUDPSharedReloadRefused: a reload that fails leaves a shared address
// as it was: its routes, and the sessions of its clients.
func TestUDPSharedReloadRefused(t *testing.T) {
	leakCheck(t)
	a, b, def := newRecTarget(t, "A"), newRecTarget(t, "B"), newRecTarget(t, "D")
	routes := []Route{sniRoute("a", a, []string{"a.example"}, nil), sniRoute("d", def, nil, nil)}
	s, ra := sharedUDP(t, routes...)
	c := dialUDP(t, ra)
	first := sendAll(t, c, quicInitials(t, quichello.Version1, "a.example", nil, 2))
	if !strings.HasPrefix(first, "A:") {
		t.Fatalf("reply %q", first)
	}
	taken := listenUDP4(t) // an address no route can bind
	rb := sniRoute("b", b, []string{"b.example"}, nil)
	rb.Listen.Address = ra.String()
	next := append(slices.Clone(routes), rb, Route{Name: "x", Listen: Addr{"udp", taken.LocalAddr().String()}, Target: def.addr()})
	for i := range 2 {
		next[i].Listen.Address = ra.String()
	}
	if err := s.Update(Config{Routes: next}); err == nil {
		t.Fatal("reload binding a taken address succeeded")
	}
	if got := sendAll(t, c, [][]byte{quicShort([]byte("whatever"), "x")}); got != first {
		t.Fatalf("after the refused reload: reply %q, want %q", got, first)
	}
	if got := sendAll(t, dialUDP(t, ra), quicInitials(t, quichello.Version1, "b.example", nil, 1)); !strings.HasPrefix(got, "D:") {
		t.Fatalf("a client of the refused route b: reply %q, want the default route's", got)
	}
	if st := frontStats(t, s); len(st.Routes) != 2 {
		t.Fatalf("routes %v", st.Routes)
	}
}

func listenUDP4(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestUDPSNIHeldKeepsOrder: a datagram that is no part of a hello, from a
// client whose hello is incomplete, is held with the rest and reaches the
// route chosen in its place.
func TestUDPSNIHeldKeepsOrder(t *testing.T) {
	leakCheck(t)
	a, def := newRecTarget(t, "A"), newRecTarget(t, "D")
	_, ra := sharedUDP(t, sniRoute("a", a, []string{"a.example"}, nil), sniRoute("d", def, nil, nil))
	dgs := quicInitials(t, quichello.Version1, "a.example", nil, 2)
	sent := [][]byte{dgs[0], quicShort([]byte("whatever"), "x"), dgs[1]}
	if got := sendAll(t, dialUDP(t, ra), sent); !strings.HasPrefix(got, "A:") {
		t.Fatalf("reply %q", got)
	}
	if !a.eventually(sent) {
		t.Fatal("route a did not receive the datagrams in the order sent")
	}
}
