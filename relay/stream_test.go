package relay

import (
	"errors"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/proxyproto"
)

// The stream's steps are decisions on its route and addresses: these
// tests take them with no socket, as either engine would.

// streamOf is a stream admitted to a route with r's settings.
func streamOf(t *testing.T, r Route) *stream {
	t.Helper()
	s := &Server{log: slog.New(slog.DiscardHandler)}
	s.gate.wake = make(chan struct{})
	r.Name = "t"
	r.Listen = Addr{"tcp", "127.0.0.1:1"}
	r.Targets = []Target{{Addr: Addr{"tcp", "10.0.0.1:80"}, Weight: 1}}
	st := &stream{src: netip.MustParseAddrPort("192.0.2.7:4000")}
	if !st.take(newRoute(s, r, nil)) {
		t.Fatal("no slot on an empty route")
	}
	return st
}

func TestTrustsPeer(t *testing.T) {
	lan := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		peer    string
		want    bool
	}{
		{"no list trusts anyone", nil, "192.0.2.7:1", true},
		{"no list trusts a Unix peer", nil, "", true},
		{"listed", lan, "10.1.2.3:1", true},
		{"listed, v4-mapped", lan, "[::ffff:10.1.2.3]:1", true},
		{"not listed", lan, "192.0.2.7:1", false},
		{"a Unix peer has no address to list", lan, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var peer netip.AddrPort
			if tc.peer != "" {
				peer = netip.MustParseAddrPort(tc.peer)
			}
			if got := trustsPeer(&Route{AcceptProxy: true, TrustedProxies: tc.trusted}, peer); got != tc.want {
				t.Errorf("trustsPeer = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestStreamProxyPeerCounts(t *testing.T) {
	st := streamOf(t, Route{AcceptProxy: true, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if !st.needsProxy() || st.proxyPeer() {
		t.Fatal("an untrusted peer may send a PROXY header")
	}
	if n := st.rt.st.denied.Load(); n != 1 {
		t.Errorf("denied %d, want 1", n)
	}
}

func TestStreamGotProxy(t *testing.T) {
	st := streamOf(t, Route{AcceptProxy: true})
	h := proxyproto.Header{Command: proxyproto.Proxy,
		Source:      netip.MustParseAddrPort("[::ffff:198.51.100.1]:5000"),
		Destination: netip.MustParseAddrPort("[::ffff:198.51.100.2]:443")}
	st.gotProxy(&h)
	if st.needsProxy() || !st.dstKnown || st.src.String() != "198.51.100.1:5000" || st.dst.String() != "198.51.100.2:443" {
		t.Errorf("after the header: src %v dst %v (known %v), needsProxy %v", st.src, st.dst, st.dstKnown, st.needsProxy())
	}
	// LOCAL: the proxy's own connection keeps the socket's addresses.
	st = streamOf(t, Route{AcceptProxy: true})
	src := st.src
	st.gotProxy(&proxyproto.Header{Command: proxyproto.Local})
	if st.needsProxy() || st.dstKnown || st.src != src {
		t.Errorf("a LOCAL header changed the client to %v (dst known %v)", st.src, st.dstKnown)
	}
}

func TestStreamAdmitClient(t *testing.T) {
	deny := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	st := streamOf(t, Route{Deny: deny})
	if st.admitClient() || st.rt.st.denied.Load() != 1 {
		t.Error("a denied client was let in, or not counted")
	}
	st = streamOf(t, Route{MaxConnsPerClient: 1})
	if !st.admitClient() || !st.perClient {
		t.Fatal("the client's first connection was refused")
	}
	other := &stream{rt: st.rt, cfg: st.cfg, src: st.src}
	if other.admitClient() || st.rt.st.overLimit.Load() != 1 {
		t.Error("a second connection of the client went over its limit, or was not counted")
	}
	st.release()
	if !other.admitClient() {
		t.Error("the client's slot was not given back")
	}
}

func TestStreamTakeRelease(t *testing.T) {
	st := streamOf(t, Route{MaxConns: 1})
	rt := st.rt
	if next := (&stream{}); next.take(rt) {
		t.Fatal("a second stream took the route's only slot")
	}
	st.release()
	if rt.active.Load() != 0 || rt.srv.active.Load() != 0 {
		t.Errorf("after release: route %d, server %d active", rt.active.Load(), rt.srv.active.Load())
	}
}

func TestStreamEndReason(t *testing.T) {
	for _, tc := range []struct {
		name      string
		why       error
		first     endReason
		known     endReason
		want      endReason
		idle, err uint64
	}{
		{"client closed first", nil, endClientClosed, 0, endClientClosed, 0, 0},
		{"target closed first", nil, endTargetClosed, 0, endTargetClosed, 0, 0},
		{"idle", errIdle, 0, 0, endIdle, 1, 0},
		{"shutdown", errShutdown, endClientClosed, 0, endShutdown, 0, 0},
		{"a reset", errors.New("connection reset"), 0, 0, endReset, 0, 1},
		{"no target answered", errQuiet, 0, endNoTarget, endNoTarget, 0, 0},
		{"the client reset before the dial", errors.New("reset"), 0, endReset, endReset, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := streamOf(t, Route{})
			st.endFirst, st.endWhy = tc.first, tc.known
			if got := st.endReason(tc.why); got != tc.want {
				t.Errorf("end %v, want %v", got, tc.want)
			}
			if c := &st.rt.st; c.idleTimeouts.Load() != tc.idle || c.errCopy.Load() != tc.err {
				t.Errorf("idle timeouts %d, copy errors %d; want %d, %d", c.idleTimeouts.Load(), c.errCopy.Load(), tc.idle, tc.err)
			}
		})
	}
}

func TestStreamEndCounts(t *testing.T) {
	st := streamOf(t, Route{})
	b := st.rt.targets().bs[0]
	st.relayTo(b)
	st.upN, st.downN = 3, 5
	st.end(nil, 0)
	if st.rt.st.relayed.Load() != 1 || b.active.Load() != 0 || b.bytesUp.Load() != 3 || b.bytesDown.Load() != 5 {
		t.Errorf("relayed %d; target active %d, up %d, down %d", st.rt.st.relayed.Load(), b.active.Load(), b.bytesUp.Load(), b.bytesDown.Load())
	}
	// Turned away before its dial: counted where it was, not a relay.
	st = streamOf(t, Route{})
	st.end(errQuiet, 0)
	st.noTarget()
	st.end(errQuiet, 0)
	if st.rt.st.relayed.Load() != 0 || st.rt.st.errDial.Load() != 1 {
		t.Errorf("relayed %d, dial errors %d; want 0, 1", st.rt.st.relayed.Load(), st.rt.st.errDial.Load())
	}
}

func TestIdleLeft(t *testing.T) {
	s := int64(time.Second)
	for _, tc := range []struct {
		last, now, want int64
	}{
		{0, 0, 10 * s},
		{0, 4 * s, 6 * s},
		{2 * s, 4 * s, 8 * s},
		{0, 10 * s, 0},
		{0, 11 * s, -s},
	} {
		if got := idleLeft(10*time.Second, tc.last, tc.now); got != tc.want {
			t.Errorf("idleLeft(10s, %v, %v) = %v, want %v", time.Duration(tc.last), time.Duration(tc.now), time.Duration(got), time.Duration(tc.want))
		}
	}
}

func TestAppendProxyHeader(t *testing.T) {
	st := streamOf(t, Route{})
	st.dst = netip.MustParseAddrPort("192.0.2.1:443")
	for _, v := range []int{0, 1, 2} {
		st.cfg = &Route{SendProxy: v}
		h := st.appendProxyHeader(nil)
		if v == 0 {
			if len(h) != 0 {
				t.Errorf("SendProxy 0 sent %q", h)
			}
			continue
		}
		got, n, err := proxyproto.Parse(h)
		if err != nil || n != len(h) || got.Source != st.src || got.Destination != st.dst || len(h) > maxProxyHeader {
			t.Errorf("v%d header %q: %+v, %d of %d bytes, %v", v, h, got, n, len(h), err)
		}
	}
}
