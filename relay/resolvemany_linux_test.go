package relay

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestTargetNameFirstAddressHung: a target name whose first address leaves
// connects unanswered is reached at its next address within the route's
// dial timeout: the timeout is shared among the name's addresses.
func TestTargetNameFirstAddressHung(t *testing.T) {
	forEachEngine(t, testTargetNameFirstAddressHung)
}

func testTargetNameFirstAddressHung(t *testing.T) {
	leakCheck(t)
	hung := silentTarget(t) // 127.0.0.1:P, its queue full
	_, port, _ := net.SplitHostPort(hung)
	ln, err := net.Listen("tcp6", net.JoinHostPort("::1", port))
	if err != nil {
		t.Skipf("no [::1]:%s to listen on: %v", port, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); echo(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	fakeDNS(t, map[string][]netip.Addr{
		"hung-first.zeroio.test": {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")},
	})
	s := startRelay(t, route0("127.0.0.1:0", Addr{"tcp", net.JoinHostPort("hung-first.zeroio.test", port)},
		func(r *Route) { r.DialTimeout = 2 * time.Second }))
	for i := range 2 {
		c := dialRoute(t, s, "r")
		if err := roundTrip(c, 1000, uint64(i)); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		c.Close()
	}
}

// TestTargetAddrCacheBounded: a loop's cache of resolved targets stays
// within maxTargetAddrs however many addresses its routes have had, as
// reloads that change targets give them, and still answers for each.
func TestTargetAddrCacheBounded(t *testing.T) {
	l := &loop{}
	c := &evConn{lp: l}
	for i := range 3 * maxTargetAddrs {
		a := Addr{Network: "tcp", Address: fmt.Sprintf("127.0.%d.%d:80", i/250, i%250+1)}
		sa, err, pending := l.resolve(a, c)
		if sa == nil || err != nil || pending {
			t.Fatalf("%v: %v, %v, pending %v", a, sa, err, pending)
		}
		if n := len(l.targets); n > maxTargetAddrs {
			t.Fatalf("after %d addresses the cache holds %d, over %d", i+1, n, maxTargetAddrs)
		}
	}
}
