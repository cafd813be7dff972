package relay

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/dnsmsg"
	"github.com/zeroio/zeroio/internal/dnsmsg/dnstest"
)

const srvName = "_svc._tcp.example.test"

// namedBackend listens on a loopback address (host:port, port 0 for any)
// and says its name on each connection, then echoes.
func namedBackend(t *testing.T, addr, name string) *testBackend {
	t.Helper()
	return startBackendAt(t, addr, func(c net.Conn) {
		c.Write([]byte(name + "\n"))
		echo(c)
	})
}

// startBackendAt is startBackend on a given TCP address.
func startBackendAt(t *testing.T, addr string, handler func(net.Conn)) *testBackend {
	t.Helper()
	var b *testBackend
	for range 20 { // the port may be taken meanwhile: rare, retried
		b = tryBackendAt(t, addr, handler)
		if b != nil {
			return b
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Skipf("cannot listen on %s", addr)
	return nil
}

func tryBackendAt(t *testing.T, addr string, handler func(net.Conn)) *testBackend {
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		return nil
	}
	return serveBackend(t, ln, Addr{"tcp", ln.Addr().String()}, handler)
}

// whoAnswers dials route r of s and returns the name its backend says,
// with the connection, which the caller closes.
func whoAnswers(t *testing.T, s *Server, r string) (string, net.Conn) {
	t.Helper()
	c := dialRoute(t, s, r)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		t.Fatalf("reading the backend's name: %v", err)
	}
	c.SetReadDeadline(time.Time{})
	return strings.TrimSpace(line), c
}

// srvAnswer is an SRV answer for srvName: one record per backend, each
// at name.example.test with its address in the additional section.
type srvRec struct {
	name       string
	b          *testBackend
	prio, wght uint16
}

func srvAnswer(ttl uint32, recs ...srvRec) dnstest.Answer {
	var a dnstest.Answer
	for _, r := range recs {
		ap := netip.MustParseAddrPort(r.b.addr.Address)
		host := r.name + ".example.test"
		a.Answer = append(a.Answer, dnsmsg.Record{Name: srvName, Type: dnsmsg.TypeSRV, TTL: ttl, Priority: r.prio, Weight: r.wght, Port: ap.Port(), Target: host})
		a.Additional = append(a.Additional, dnsmsg.Record{Name: host, Type: dnsmsg.TypeA, TTL: ttl, Addr: ap.Addr()})
	}
	return a
}

// dnsServer runs a DNS server answering srvName from *ans.
func dnsServer(t *testing.T, ans *atomic.Pointer[dnstest.Answer]) *dnstest.Server {
	t.Helper()
	d, err := dnstest.Start(func(name string, qtype uint16) dnstest.Answer {
		if a := ans.Load(); a != nil && (a.Drop || name == srvName && qtype == dnsmsg.TypeSRV) {
			return *a
		}
		return dnstest.Answer{RCode: dnsmsg.RCodeNXDomain}
	})
	if err != nil {
		t.Skipf("DNS server on loopback: %v", err)
	}
	t.Cleanup(d.Close)
	return d
}

func srvRoute(d *dnstest.Server, mod func(*Route)) Config {
	r := Route{Name: "r", Listen: Addr{"tcp", "127.0.0.1:0"}, Targets: []Target{{Addr: Addr{srvTCP, srvName}, Weight: 1}}}
	if mod != nil {
		mod(&r)
	}
	return Config{Routes: []Route{r}, Resolver: d.Addr}
}

// names collects who answers n new clients, closing each.
func names(t *testing.T, s *Server, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		who, c := whoAnswers(t, s, "r")
		got[who]++
		c.Close()
	}
	return got
}

// TestSRVTargetsFollowTheAnswer: an SRV answer of TTL 1 gives X and Y,
// then Y and Z: new clients reach only Y and Z after the change, while
// the connection X had goes on.
func TestSRVTargetsFollowTheAnswer(t *testing.T) { forEachEngine(t, testSRVTargetsFollowTheAnswer) }

func testSRVTargetsFollowTheAnswer(t *testing.T) {
	x, y, z := namedBackend(t, "127.0.0.1:0", "X"), namedBackend(t, "127.0.0.1:0", "Y"), namedBackend(t, "127.0.0.1:0", "Z")
	var ans atomic.Pointer[dnstest.Answer]
	first := srvAnswer(1, srvRec{"x", x, 0, 10}, srvRec{"y", y, 0, 10})
	ans.Store(&first)
	d := dnsServer(t, &ans)
	s := startRelay(t, srvRoute(d, nil))
	if got := names(t, s, 6); got["X"] != 3 || got["Y"] != 3 {
		t.Fatalf("clients before the change went to %v, want 3 to X and 3 to Y", got)
	}
	var held net.Conn
	for held == nil {
		who, c := whoAnswers(t, s, "r")
		if who == "X" {
			held = c
		} else {
			c.Close()
		}
	}
	defer held.Close()
	second := srvAnswer(1, srvRec{"y", y, 0, 10}, srvRec{"z", z, 0, 10})
	ans.Store(&second)
	waitFor(t, func() bool {
		ts := s.Stats().Routes[0].Targets
		return len(ts) == 3 && strings.HasSuffix(ts[1].Addr, z.addr.Address) && ts[2].Draining
	})
	st := s.Stats().Routes[0].Targets
	if want := "srv+tcp://" + srvName + "/" + y.addr.Address; st[0].Addr != want || st[0].From != "srv+tcp://"+srvName {
		t.Errorf("discovered target named %q from %q, want %q", st[0].Addr, st[0].From, want)
	}
	if got := names(t, s, 6); got["Y"] != 3 || got["Z"] != 3 {
		t.Fatalf("clients after the change went to %v, want 3 to Y and 3 to Z", got)
	}
	if err := roundTrip(held, 100000, 7); err != nil {
		t.Fatalf("X's connection after X left the answer: %v", err)
	}
	held.Close()
	waitFor(t, func() bool { return len(s.Stats().Routes[0].Targets) == 2 })
}

// TestResolveAllBalancesOverEachAddress: a name with three A records,
// resolved to all of them, is three targets, and round-robin gives each
// its share.
func TestResolveAllBalancesOverEachAddress(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs 127.0.0.2 and 127.0.0.3 on loopback, which only Linux routes by default")
	}
	a := namedBackend(t, "127.0.0.1:0", "A")
	_, port, _ := net.SplitHostPort(a.addr.Address)
	b := startBackendAt(t, "127.0.0.2:"+port, func(c net.Conn) { c.Write([]byte("B\n")); echo(c) })
	c := startBackendAt(t, "127.0.0.3:"+port, func(c net.Conn) { c.Write([]byte("C\n")); echo(c) })
	d, err := dnstest.Start(func(name string, qtype uint16) dnstest.Answer {
		if name != "web.example.test" || qtype != dnsmsg.TypeA {
			return dnstest.Answer{}
		}
		var out dnstest.Answer
		for _, be := range []*testBackend{a, b, c} {
			ap := netip.MustParseAddrPort(be.addr.Address)
			out.Answer = append(out.Answer, dnsmsg.Record{Name: name, Type: dnsmsg.TypeA, TTL: 60, Addr: ap.Addr()})
		}
		return out
	})
	if err != nil {
		t.Skip(err)
	}
	defer d.Close()
	forEachEngine(t, func(t *testing.T) {
		r := Route{Name: "r", Listen: Addr{"tcp", "127.0.0.1:0"},
			Targets: []Target{{Addr: Addr{"tcp4", "web.example.test:" + port}, Weight: 2, Resolve: ResolveAll}}}
		s := startRelay(t, Config{Routes: []Route{r}, Resolver: d.Addr})
		if got := names(t, s, 9); got["A"] != 3 || got["B"] != 3 || got["C"] != 3 {
			t.Fatalf("9 clients went to %v, want 3 each", got)
		}
		st := s.Stats().Routes[0].Targets
		if len(st) != 3 || st[1].Addr != "tcp4://web.example.test:"+port+"/127.0.0.2:"+port || st[1].Weight != 2 {
			t.Fatalf("targets %+v", st)
		}
	})
}

// TestSRVAnswerKeptWhenTheServerFails: a DNS server that stops answering
// leaves the route its last answer; the failure is logged once, and so
// is the recovery.
func TestSRVAnswerKeptWhenTheServerFails(t *testing.T) {
	defer func(d time.Duration) { dnsTimeout = d }(dnsTimeout)
	dnsTimeout = 100 * time.Millisecond
	x := namedBackend(t, "127.0.0.1:0", "X")
	var ans atomic.Pointer[dnstest.Answer]
	first := srvAnswer(1, srvRec{"x", x, 0, 0})
	ans.Store(&first)
	d := dnsServer(t, &ans)
	var logs syncBuffer
	cfg := srvRoute(d, nil)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.DNSMinTTL = 100 * time.Millisecond
	s := startRelay(t, cfg)
	ans.Store(&dnstest.Answer{Drop: true})
	n := d.Queries.Load()
	waitFor(t, func() bool { return d.Queries.Load() >= n+4 }) // several lookups failed
	if got := names(t, s, 2); got["X"] != 2 {
		t.Fatalf("clients while DNS fails went to %v, want X", got)
	}
	if c := strings.Count(logs.String(), "DNS lookup failed; keeping the last answer"); c != 1 {
		t.Fatalf("failure logged %d times, want once:\n%s", c, logs.String())
	}
	ans.Store(&first)
	waitFor(t, func() bool { return strings.Contains(logs.String(), "DNS lookup answers again") })
	n = d.Queries.Load()
	waitFor(t, func() bool { return d.Queries.Load() >= n+2 })
	if c := strings.Count(logs.String(), "DNS lookup answers again"); c != 1 {
		t.Fatalf("recovery logged %d times, want once:\n%s", c, logs.String())
	}
}

// TestSRVPriorityFallback: records of a later priority take clients only
// while no record of an earlier one is up.
func TestSRVPriorityFallback(t *testing.T) { forEachEngine(t, testSRVPriorityFallback) }

func testSRVPriorityFallback(t *testing.T) {
	x, y, z := namedBackend(t, "127.0.0.1:0", "X"), namedBackend(t, "127.0.0.1:0", "Y"), namedBackend(t, "127.0.0.1:0", "Z")
	var ans atomic.Pointer[dnstest.Answer]
	a := srvAnswer(60, srvRec{"x", x, 1, 5}, srvRec{"y", y, 2, 5}, srvRec{"z", z, 3, 5})
	ans.Store(&a)
	d := dnsServer(t, &ans)
	s := startRelay(t, srvRoute(d, nil))
	if got := names(t, s, 4); got["X"] != 4 {
		t.Fatalf("clients went to %v, want all to X, of the first priority", got)
	}
	x.ln.Close() // X refuses: its clients fail over, and it is marked down
	if got := names(t, s, 4); got["Y"] != 4 {
		t.Fatalf("with X down, clients went to %v, want all to Y, of the next priority", got)
	}
	st := s.Stats().Routes[0].Targets
	if st[0].Up || st[0].Priority != 1 || st[1].Priority != 2 || st[2].Connections != 0 {
		t.Fatalf("targets %+v", st)
	}
}

func TestSRVWeights(t *testing.T) {
	recs := []dnsmsg.Record{{Priority: 0, Weight: 60}, {Priority: 0, Weight: 20}, {Priority: 0, Weight: 0}, {Priority: 5, Weight: 0}, {Priority: 5, Weight: 0}, {Priority: 7, Weight: 65535}}
	got := srvWeights(recs)
	want := []int{256, 85, 1, 1, 1, 256}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("srvWeights %v, want %v", got, want)
	}
}

func TestSRVTargetConfig(t *testing.T) {
	a, err := ParseAddr("srv+tcp://_svc._tcp.example.test.")
	if err != nil || a != (Addr{srvTCP, srvName}) || a.Datagram() {
		t.Fatalf("ParseAddr: %v, %v", a, err)
	}
	if a, err := ParseAddr("srv+udp://_q._udp.example.test"); err != nil || !a.Datagram() {
		t.Fatalf("srv+udp: %v, %v", a, err)
	}
	for _, bad := range []string{"srv+tcp://", "srv+tcp://x.test:80", "srv+tcp://a b"} {
		if _, err := ParseAddr(bad); err == nil {
			t.Errorf("ParseAddr(%q) took it", bad)
		}
	}
	srv := Addr{srvTCP, srvName}
	for _, c := range []struct {
		name string
		r    Route
		want string
	}{
		{"srv listen", Route{Listen: srv, Target: Addr{"tcp", "127.0.0.1:1"}}, "SRV name is for targets"},
		{"srv weight", Route{Listen: Addr{"tcp", "127.0.0.1:0"}, Targets: []Target{{Addr: srv, Weight: 3}}}, "records give the weights"},
		{"srv+udp on a stream route", Route{Listen: Addr{"tcp", "127.0.0.1:0"}, Targets: []Target{{Addr: Addr{srvUDP, "_q._udp.x.test"}, Weight: 1}}}, "UDP relays only to UDP"},
		{"resolve unix", Route{Listen: Addr{"tcp", "127.0.0.1:0"}, Targets: []Target{{Addr: Addr{"unix", "/x"}, Weight: 1, Resolve: ResolveAll}}}, "not resolved"},
		{"resolve what", Route{Listen: Addr{"tcp", "127.0.0.1:0"}, Targets: []Target{{Addr: Addr{"tcp", "x.test:1"}, Weight: 1, Resolve: "some"}}}, `resolve "some"`},
	} {
		_, err := New(Config{Routes: []Route{c.r}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := New(Config{Routes: []Route{{Listen: Addr{"tcp", "127.0.0.1:0"}, Target: Addr{"tcp", "127.0.0.1:1"}}}, DNSMinTTL: time.Hour}); err == nil || !strings.Contains(err.Error(), "above maximum") {
		t.Errorf("min TTL above max: %v", err)
	}
}

// TestPriorityPick: pick gives the best priority with a target up, and a
// later one when those are down or tried.
func TestPriorityPick(t *testing.T) {
	ts := testSet(t, RoundRobin, 1, 1, 1)
	ts.prio = []uint16{2, 1, 3}
	var tried triedSet
	if b := ts.pick(netip.Addr{}, &tried); b != ts.bs[1] {
		t.Fatalf("first pick %s, want the priority 1 target", b.name)
	}
	if b := ts.pick(netip.Addr{}, &tried); b != ts.bs[0] {
		t.Fatalf("second pick %s, want the priority 2 target", b.name)
	}
	ts.bs[0].downUntil.Store(noRetry)
	tried = triedSet{}
	tried.add(1)
	if b := ts.pick(netip.Addr{}, &tried); b != ts.bs[2] {
		t.Fatalf("pick with 1 tried and 2 down: %s, want the priority 3 target", b.name)
	}
}

// TestSRVUDPTargets: a UDP route's srv+udp target sends each new session
// to one of its records' backends, following the answer.
func TestSRVUDPTargets(t *testing.T) {
	leakCheck(t)
	a, b := udpTagServer(t, "A"), udpTagServer(t, "B")
	rec := func(name string, c *net.UDPConn) dnsmsg.Record {
		return dnsmsg.Record{Name: "_q._udp.example.test", Type: dnsmsg.TypeSRV, TTL: 1, Port: c.LocalAddr().(*net.UDPAddr).AddrPort().Port(), Target: name + ".example.test"}
	}
	ip := dnsmsg.Record{Type: dnsmsg.TypeA, TTL: 1, Addr: netip.MustParseAddr("127.0.0.1")}
	ipA, ipB := ip, ip
	ipA.Name, ipB.Name = "a.example.test", "b.example.test"
	var ans atomic.Pointer[dnstest.Answer]
	ans.Store(&dnstest.Answer{Answer: []dnsmsg.Record{rec("a", a)}, Additional: []dnsmsg.Record{ipA}})
	d, err := dnstest.Start(func(name string, qtype uint16) dnstest.Answer { return *ans.Load() })
	if err != nil {
		t.Skip(err)
	}
	defer d.Close()
	r := Route{Name: "u", Listen: Addr{"udp", "127.0.0.1:0"}, Targets: []Target{{Addr: Addr{srvUDP, "_q._udp.example.test"}, Weight: 1}}}
	s := startRelay(t, Config{Routes: []Route{r}, Resolver: d.Addr})
	ra := s.Addrs("u")[0].(*net.UDPAddr)
	old := dialUDP(t, ra)
	if got := askUDP(old); got != "A" {
		t.Fatalf("first session answered by %q, want A", got)
	}
	ans.Store(&dnstest.Answer{Answer: []dnsmsg.Record{rec("b", b)}, Additional: []dnsmsg.Record{ipB}})
	waitFor(t, func() bool { return strings.HasSuffix(s.Stats().Routes[0].Targets[0].Addr, b.LocalAddr().String()) })
	if got := askUDP(dialUDP(t, ra)); got != "B" {
		t.Errorf("new session after the change answered by %q, want B", got)
	}
	if got := askUDP(old); got != "A" {
		t.Errorf("session under way answered by %q after the change, want A", got)
	}
}

// TestSRVPriorityHealthChecks: with active checks, a first-priority
// target the checks mark down sends every client to the next priority,
// without a client's dial failing first.
func TestSRVPriorityHealthChecks(t *testing.T) {
	x, y := namedBackend(t, "127.0.0.1:0", "X"), namedBackend(t, "127.0.0.1:0", "Y")
	var ans atomic.Pointer[dnstest.Answer]
	a := srvAnswer(60, srvRec{"x", x, 0, 1}, srvRec{"y", y, 10, 1})
	ans.Store(&a)
	d := dnsServer(t, &ans)
	s := startRelay(t, srvRoute(d, func(r *Route) {
		r.HealthCheck = HealthCheck{Interval: 20 * time.Millisecond, Rise: 1, Fall: 1}
	}))
	if got := names(t, s, 2); got["X"] != 2 {
		t.Fatalf("clients went to %v, want X", got)
	}
	x.ln.Close()
	waitFor(t, func() bool { return !targetStats(s, 0).Up })
	if got := names(t, s, 3); got["Y"] != 3 {
		t.Fatalf("with X checked down, clients went to %v, want Y", got)
	}
	if st := targetStats(s, 0); st.DialErrors != 0 {
		t.Fatalf("X: %d dial failures, want none: the checks found it down", st.DialErrors)
	}
}

func TestDiscover(t *testing.T) {
	x, y := namedBackend(t, "127.0.0.1:0", "X"), namedBackend(t, "127.0.0.1:0", "Y")
	var ans atomic.Pointer[dnstest.Answer]
	a := srvAnswer(5, srvRec{"x", x, 0, 1}, srvRec{"y", y, 0, 1})
	ans.Store(&a)
	d := dnsServer(t, &ans)
	got, err := Discover(t.Context(), Config{Resolver: d.Addr}, Target{Addr: Addr{srvTCP, srvName}, Weight: 1})
	if err != nil || len(got) != 2 || got[0] != x.addr || got[1] != y.addr {
		t.Fatalf("Discover: %v, %v; want %v and %v", got, err, x.addr, y.addr)
	}
	static := Target{Addr: Addr{"tcp", "127.0.0.1:1"}, Weight: 1}
	if got, err := Discover(t.Context(), Config{}, static); err != nil || len(got) != 1 || got[0] != static.Addr {
		t.Fatalf("Discover of a static target: %v, %v", got, err)
	}
}
