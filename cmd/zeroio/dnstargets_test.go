package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/zeroio/zeroio/internal/dnsmsg"
	"github.com/zeroio/zeroio/internal/dnsmsg/dnstest"
)

// TestDNSTargetsFromTheFile: a config file's resolver, dns_min_ttl and
// an SRV target reach the relay: clients go to the answer's backends,
// each a target of its own in the metrics, and a changed answer is
// logged and followed.
func TestDNSTargetsFromTheFile(t *testing.T) {
	x, y := nameServer(t, "x"), nameServer(t, "y")
	var backends atomic.Pointer[[]string]
	backends.Store(&[]string{x})
	d, err := dnstest.Start(func(name string, qtype uint16) dnstest.Answer {
		if name != "_svc._tcp.example.test" || qtype != dnsmsg.TypeSRV {
			return dnstest.Answer{RCode: dnsmsg.RCodeNXDomain}
		}
		var a dnstest.Answer
		for _, b := range *backends.Load() {
			ap := netip.MustParseAddrPort(b)
			a.Answer = append(a.Answer, dnsmsg.Record{Name: name, Type: dnsmsg.TypeSRV, TTL: 1, Port: ap.Port(), Target: "h.example.test"})
		}
		a.Additional = []dnsmsg.Record{{Name: "h.example.test", Type: dnsmsg.TypeA, TTL: 1, Addr: netip.MustParseAddr("127.0.0.1")}}
		return a
	})
	if err != nil {
		t.Skip(err)
	}
	defer d.Close()
	maddr := freeAddr(t)
	conf := writeConfig(t, "resolver: %s\ndns_min_ttl: 200ms\nmetrics: %s\nroutes:\n  - {name: r, listen: tcp://127.0.0.1:0, targets: [srv+tcp://_svc._tcp.example.test]}\n", d.Addr, maddr)
	p := startProc(t, 1, "-c", conf)
	addr := p.addr(t, "r")
	if who, err := whoAnswers(addr); err != nil || who != "x" {
		t.Fatalf("first client: %q, %v", who, err)
	}
	backends.Store(&[]string{y})
	p.waitLog(t, "DNS answer changed the targets", 1)
	for range 3 {
		if who, err := whoAnswers(addr); err != nil || who != "y" {
			t.Fatalf("client after the change: %q, %v", who, err)
		}
	}
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf(`zeroio_relay_target_connections_total{route="r",target="srv+tcp://_svc._tcp.example.test/%s"} 3`, y)
	if !strings.Contains(string(body), want) {
		t.Errorf("metrics lack %s", want)
	}
}

// TestResolveAllFlag: --resolve all and --resolver make a target's host
// name stand for each of its addresses.
func TestResolveAllFlag(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs 127.0.0.2 on loopback")
	}
	one := serve(t, "tcp", "127.0.0.1:0", func(c net.Conn) { io.WriteString(c, "one\n"); io.Copy(c, c) })
	_, port, _ := net.SplitHostPort(one.Addr().String())
	ln, err := net.Listen("tcp", "127.0.0.2:"+port)
	if err != nil {
		t.Skipf("127.0.0.2:%s: %v", port, err)
	}
	ln.Close()
	serve(t, "tcp", "127.0.0.2:"+port, func(c net.Conn) { io.WriteString(c, "two\n"); io.Copy(c, c) })
	d, err := dnstest.Start(func(name string, qtype uint16) dnstest.Answer {
		if name != "web.example.test" || qtype != dnsmsg.TypeA {
			return dnstest.Answer{}
		}
		return dnstest.Answer{Answer: []dnsmsg.Record{
			{Name: name, Type: dnsmsg.TypeA, TTL: 30, Addr: netip.MustParseAddr("127.0.0.1")},
			{Name: name, Type: dnsmsg.TypeA, TTL: 30, Addr: netip.MustParseAddr("127.0.0.2")},
		}}
	})
	if err != nil {
		t.Skip(err)
	}
	defer d.Close()
	p := startProc(t, 1, "--resolver", d.Addr.String(), "--resolve", "all", "tcp://127.0.0.1:0", "tcp://web.example.test:"+port)
	addr := p.addr(t, "tcp://127.0.0.1:0")
	got := map[string]int{}
	for range 4 {
		who, err := whoAnswers(addr)
		if err != nil {
			t.Fatal(err)
		}
		got[who]++
	}
	if got["one"] != 2 || got["two"] != 2 {
		t.Fatalf("clients went to %v, want each address twice", got)
	}
}

func TestDNSSettings(t *testing.T) {
	conf := writeConfig(t, `routes:
  - name: r
    listen: tcp://127.0.0.1:0
    resolve: all
    targets:
      - {url: "tcp://a.example.test:80", resolve: all}
      - tcp://b.example.test:80
      - unix:///tmp/x.sock
      - srv+tcp://_svc._tcp.example.test
`)
	cfg, _, err := loadFile(conf, routeSpec{})
	if err != nil {
		t.Fatal(err)
	}
	ts := cfg.Routes[0].Targets
	if ts[0].Resolve != "all" || ts[1].Resolve != "all" || ts[2].Resolve != "" || ts[3].Addr.Network != "srv+tcp" {
		t.Fatalf("targets %+v", ts)
	}
	for in, want := range map[string]string{"": "invalid AddrPort", "127.0.0.1": "127.0.0.1:53", "[::1]:5353": "[::1]:5353", "::1": "[::1]:53"} {
		ap, err := parseResolver(in)
		if got := ap.String(); err != nil || got != want {
			t.Errorf("parseResolver(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	if _, err := parseResolver("dns.example.test:53"); err == nil {
		t.Error("parseResolver took a host name")
	}
}
