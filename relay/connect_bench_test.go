package relay_test

import (
	"context"
	"io"
	"net"
	"testing"

	"github.com/zeroio/zeroio/relay"
)

// echoTargets starts n loopback echo servers for a benchmark.
func echoTargets(b *testing.B, n int) []relay.Addr {
	var as []relay.Addr
	for range n {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { io.Copy(c, c); c.Close() }()
			}
		}()
		as = append(as, relay.Addr{Network: "tcp", Address: ln.Addr().String()})
	}
	return as
}

// connectBench relays b.N short connections (one byte each way) through
// a relay of route r: what a connection costs the relay, its dial and
// choice of target included.
func connectBench(b *testing.B, engine string, r relay.Route) {
	r.Name, r.Listen = "r", relay.Addr{Network: "tcp", Address: "127.0.0.1:0"}
	s, err := relay.New(relay.Config{Routes: []relay.Route{r}, Engine: engine})
	if err != nil {
		b.Skip(err) // an engine this platform lacks
	}
	if err := s.Start(); err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	addr := s.Addrs("r")[0].String()
	var buf [1]byte
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(buf[:]); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:]); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

func BenchmarkRelayConnect(b *testing.B) {
	for _, engine := range benchEngines {
		b.Run("engine="+engine+"/targets=1", func(b *testing.B) {
			r := relay.Route{Target: echoTargets(b, 1)[0]}
			noIdleTimeout(&r)
			connectBench(b, engine, r)
		})
		benchMoreTargets(b, engine)
	}
}
