package dnsmsg_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/dnsmsg"
	"github.com/zeroio/zeroio/internal/dnsmsg/dnstest"
)

func startServer(t *testing.T, h dnstest.Handler) *dnstest.Server {
	t.Helper()
	s, err := dnstest.Start(h)
	if err != nil {
		t.Skipf("loopback DNS server: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

var a1 = dnsmsg.Record{Name: "web.example.test", Type: dnsmsg.TypeA, TTL: 30, Addr: netip.MustParseAddr("127.0.0.2")}

func TestLookupAnswersOverUDP(t *testing.T) {
	s := startServer(t, func(name string, qtype uint16) dnstest.Answer {
		if name == "web.example.test" && qtype == dnsmsg.TypeA {
			return dnstest.Answer{Answer: []dnsmsg.Record{a1}}
		}
		return dnstest.Answer{RCode: dnsmsg.RCodeNXDomain, Authority: []dnsmsg.Record{{Name: "example.test", Type: dnsmsg.TypeSOA, TTL: 60, MinTTL: 10}}}
	})
	c := &dnsmsg.Client{Servers: []netip.AddrPort{s.Addr}, Timeout: time.Second}
	r, err := c.Lookup(context.Background(), "web.example.test.", dnsmsg.TypeA)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Records) != 1 || r.Records[0] != a1 || r.TTL != 30 || r.NotFound {
		t.Fatalf("result %+v", r)
	}
	r, err = c.Lookup(context.Background(), "nope.example.test", dnsmsg.TypeA)
	if err != nil || !r.NotFound || r.TTL != 10 || len(r.Records) != 0 {
		t.Fatalf("negative answer: %+v, %v", r, err)
	}
	if s.TCPQueries.Load() != 0 {
		t.Fatal("asked over TCP without a truncated answer")
	}
}

func TestLookupRetriesTruncatedOverTCP(t *testing.T) {
	s := startServer(t, func(name string, qtype uint16) dnstest.Answer {
		return dnstest.Answer{Truncate: true, Answer: []dnsmsg.Record{a1}}
	})
	c := &dnsmsg.Client{Servers: []netip.AddrPort{s.Addr}, Timeout: time.Second}
	r, err := c.Lookup(context.Background(), "web.example.test", dnsmsg.TypeA)
	if err != nil || len(r.Records) != 1 {
		t.Fatalf("%+v, %v", r, err)
	}
	if s.TCPQueries.Load() != 1 {
		t.Fatalf("%d TCP queries, want 1", s.TCPQueries.Load())
	}
}

func TestLookupFailsOverToTheNextServer(t *testing.T) {
	dead := startServer(t, func(string, uint16) dnstest.Answer { return dnstest.Answer{Drop: true} })
	fail := startServer(t, func(string, uint16) dnstest.Answer { return dnstest.Answer{RCode: dnsmsg.RCodeServFail} })
	good := startServer(t, func(string, uint16) dnstest.Answer { return dnstest.Answer{Answer: []dnsmsg.Record{a1}} })
	c := &dnsmsg.Client{Servers: []netip.AddrPort{dead.Addr, fail.Addr, good.Addr}, Timeout: 200 * time.Millisecond}
	r, err := c.Lookup(context.Background(), "web.example.test", dnsmsg.TypeA)
	if err != nil || len(r.Records) != 1 {
		t.Fatalf("%+v, %v", r, err)
	}
	c.Servers = c.Servers[:2]
	_, err = c.Lookup(context.Background(), "web.example.test", dnsmsg.TypeA)
	var se *dnsmsg.ServerError
	if !errors.As(err, &se) || se.Server != fail.Addr {
		t.Fatalf("err %v, want the last server's", err)
	}
}

// A datagram with another ID, or another question, is not the answer: the
// client waits for the one that is.
func TestLookupIgnoresMismatchedAnswers(t *testing.T) {
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Skip(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 1500)
		n, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		q, _ := dnsmsg.Parse(buf[:n])
		h := dnsmsg.Header{ID: q.ID + 1, QName: q.QName, QType: q.QType}
		wrongID, _ := dnsmsg.AppendResponse(nil, h, []dnsmsg.Record{{Name: q.QName, Type: dnsmsg.TypeA, TTL: 1, Addr: netip.MustParseAddr("192.0.2.66")}}, nil, nil)
		h = dnsmsg.Header{ID: q.ID, QName: "other.test", QType: q.QType}
		wrongQ, _ := dnsmsg.AppendResponse(nil, h, nil, nil, nil)
		h = dnsmsg.Header{ID: q.ID, QName: q.QName, QType: q.QType}
		right, _ := dnsmsg.AppendResponse(nil, h, []dnsmsg.Record{a1}, nil, nil)
		for _, b := range [][]byte{wrongID, []byte("junk"), wrongQ, right} {
			pc.WriteToUDPAddrPort(b, from)
		}
	}()
	c := &dnsmsg.Client{Servers: []netip.AddrPort{pc.LocalAddr().(*net.UDPAddr).AddrPort()}, Timeout: 2 * time.Second}
	r, err := c.Lookup(context.Background(), "web.example.test", dnsmsg.TypeA)
	if err != nil || len(r.Records) != 1 || r.Records[0].Addr != a1.Addr {
		t.Fatalf("%+v, %v", r, err)
	}
}

func TestLookupEndsWithItsContext(t *testing.T) {
	dead := startServer(t, func(string, uint16) dnstest.Answer { return dnstest.Answer{Drop: true} })
	c := &dnsmsg.Client{Servers: []netip.AddrPort{dead.Addr}, Timeout: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Lookup(ctx, "web.example.test", dnsmsg.TypeA)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("no error from a cancelled lookup")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("lookup did not end with its context")
	}
}

func TestResolvConfServers(t *testing.T) {
	p := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(p, []byte("# comment\nsearch example.test\nnameserver 192.0.2.53\nnameserver ::1\nnameserver bogus\noptions ndots:2\n"), 0o644)
	got := dnsmsg.ReadResolvConf(p)
	want := []netip.AddrPort{netip.MustParseAddrPort("192.0.2.53:53"), netip.MustParseAddrPort("[::1]:53")}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %v, want %v", got, want)
	}
	os.WriteFile(p, []byte("search x\n"), 0o644)
	if got := dnsmsg.ReadResolvConf(p); len(got) != 2 || got[0].Port() != 53 || !got[0].Addr().IsLoopback() {
		t.Fatalf("no nameserver line: got %v, want this machine's", got)
	}
}

func TestLookupAddrsAsksEachFamily(t *testing.T) {
	s := startServer(t, func(name string, qtype uint16) dnstest.Answer {
		switch qtype {
		case dnsmsg.TypeA:
			return dnstest.Answer{Answer: []dnsmsg.Record{a1}}
		case dnsmsg.TypeAAAA:
			return dnstest.Answer{Answer: []dnsmsg.Record{{Name: name, Type: dnsmsg.TypeAAAA, TTL: 4, Addr: netip.MustParseAddr("::1")}}}
		}
		return dnstest.Answer{}
	})
	c := &dnsmsg.Client{Servers: []netip.AddrPort{s.Addr}, Timeout: time.Second}
	got, err := c.LookupAddrs(context.Background(), "web.example.test", "ip")
	if err != nil || len(got.IPs) != 2 || got.IPs[0] != a1.Addr || got.TTL != 4 {
		t.Fatalf("ip: %+v, %v", got, err)
	}
	got, err = c.LookupAddrs(context.Background(), "web.example.test", "ip4")
	if err != nil || len(got.IPs) != 1 || got.TTL != 30 {
		t.Fatalf("ip4: %+v, %v", got, err)
	}
}
