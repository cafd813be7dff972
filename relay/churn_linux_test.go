package relay

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/proxyproto"
)

// TestErrorChurnNoLeak runs clients through every way a relay can end
// early (no target answers, the access list refuses, a PROXY header is
// garbage or never comes, the client leaves while the dial is under way
// or right after connecting) next to good ones, many at once, and checks
// that no goroutine or descriptor is left and nothing panics.
func TestErrorChurnNoLeak(t *testing.T) { forEachEngine(t, testErrorChurnNoLeak) }

func testErrorChurnNoLeak(t *testing.T) {
	leakCheck(t)
	good := startBackend(t, "tcp4", echo)
	dead := deadAddr(t)
	hung := mustAddr(t, "tcp://"+silentTarget(t))
	routes := []Route{
		{Name: "dead", Listen: mustAddr(t, "tcp://127.0.0.1:0"), Target: dead},
		{Name: "denied", Listen: mustAddr(t, "tcp://127.0.0.1:0"), Target: good.addr,
			Deny: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		{Name: "proxy", Listen: mustAddr(t, "tcp://127.0.0.1:0"), Target: good.addr,
			AcceptProxy: true, ProxyHeaderTimeout: 100 * time.Millisecond},
		{Name: "hung", Listen: mustAddr(t, "tcp://127.0.0.1:0"), Target: hung, DialTimeout: 200 * time.Millisecond},
		{Name: "good", Listen: mustAddr(t, "tcp://127.0.0.1:0"), Target: good.addr, IdleTimeout: time.Second},
	}
	s := startRelay(t, Config{Routes: routes})
	hdr := proxyproto.AppendV1(nil, netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("192.0.2.2:2"))
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				name := routes[(w+i)%len(routes)].Name
				c := dialRoute(t, s, name)
				c.SetDeadline(time.Now().Add(5 * time.Second))
				switch name {
				case "proxy":
					switch i % 3 {
					case 0:
						io.WriteString(c, "garbage, not a PROXY header\r\n")
						io.Copy(io.Discard, c) // until the relay closes
					case 1:
						c.Write(hdr)
						ping(c)
					case 2: // nothing, until the header timeout closes it
						io.Copy(io.Discard, c)
					}
				case "good":
					if i%2 == 0 {
						ping(c)
					} else {
						c.(*net.TCPConn).SetLinger(0) // a reset at once
					}
				default:
					if i%2 == 0 {
						io.Copy(io.Discard, c) // until the relay closes
					} // else leave at once, in the middle of the relay's work
				}
				c.Close()
			}
		}()
	}
	wg.Wait()
	waitFor(t, func() bool { return s.Stats().Active == 0 })
}
