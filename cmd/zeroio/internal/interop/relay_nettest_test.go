package interop

import (
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/zeroio/zeroio/relay"
	"golang.org/x/net/nettest"
)

// TestRelayNettest runs x/net's net.Conn conformance tests on a pair of
// connections joined by a zeroio relay: c1 dialled to the relay, c2
// accepted by the target. What one end writes, reads, closes and times out
// must behave as on one direct connection. Every engine the platform has;
// on Linux, where the event engine is the default, both.
func TestRelayNettest(t *testing.T) {
	for _, engine := range []string{relay.EngineGoroutine, relay.EngineEvent} {
		t.Run("engine="+engine, func(t *testing.T) {
			listen, _ := relay.ParseAddr("tcp://127.0.0.1:0")
			target, _ := relay.ParseAddr("tcp://127.0.0.1:9")
			_, err := relay.New(relay.Config{Engine: engine, Routes: []relay.Route{{Name: "probe", Listen: listen, Target: target}}})
			// The event engine is Linux's default: never skipped there.
			if err != nil && strings.Contains(err.Error(), "not supported") && runtime.GOOS != "linux" {
				t.Skipf("engine %s not on %s: %v", engine, runtime.GOOS, err)
			} else if err != nil {
				t.Fatal(err)
			}
			nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
				return relayPipe(engine)
			})
		})
	}
}

// relayPipe starts a relay from a loopback port to a loopback target and
// returns a client connected through it and the target's end.
func relayPipe(engine string) (c1, c2 net.Conn, stop func(), err error) {
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, nil, err
	}
	listen, _ := relay.ParseAddr("tcp://127.0.0.1:0")
	target, _ := relay.ParseAddr("tcp://" + backend.Addr().String())
	srv, err := relay.New(relay.Config{Engine: engine, Routes: []relay.Route{{
		Name: "nettest", Listen: listen, Target: target,
	}}})
	if err == nil {
		err = srv.Start()
	}
	if err != nil {
		backend.Close()
		return nil, nil, nil, err
	}
	shutdown := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		backend.Close()
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := backend.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c1, err = net.Dial("tcp", srv.Addrs("nettest")[0].String())
	if err != nil {
		shutdown()
		return nil, nil, nil, err
	}
	c2, ok := <-accepted
	if !ok {
		c1.Close()
		shutdown()
		return nil, nil, nil, net.ErrClosed
	}
	stop = func() {
		c1.Close()
		c2.Close()
		shutdown()
	}
	return c1, c2, stop, nil
}
