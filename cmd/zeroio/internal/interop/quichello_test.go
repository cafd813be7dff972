package interop

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/zeroio/zeroio/internal/quichello"
	"github.com/zeroio/zeroio/internal/tlshello"
)

// TestQUICHelloFromQuicGo has quic-go's client dial a socket that only
// listens, and reads the server name and ALPN from the Initial datagrams
// it sends, as the relay does before it picks a route. quic-go's hello
// with a post-quantum key share spans two datagrams.
func TestQUICHelloFromQuicGo(t *testing.T) {
	for _, v := range []quic.Version{quic.Version1, quic.Version2} {
		ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		done := make(chan error, 1)
		go func() {
			tc := &tls.Config{ServerName: "svc.example", NextProtos: []string{"h3", "x"}, InsecureSkipVerify: true}
			_, err := quic.DialAddr(ctx, ln.LocalAddr().String(), tc, &quic.Config{Versions: []quic.Version{v}})
			done <- err
		}()
		var h quichello.Hello
		var info tlshello.Info
		buf := make([]byte, 2048)
		datagrams := 0
		for {
			ln.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, _, err := ln.ReadFromUDP(buf)
			if err != nil {
				t.Fatalf("version %v: no whole hello after %d datagrams: %v", v, datagrams, err)
			}
			datagrams++
			err = h.Add(buf[:n], &info)
			if err == nil {
				break
			}
			if !errors.Is(err, quichello.ErrNeedMore) {
				t.Fatalf("version %v: datagram %d: %v", v, datagrams, err)
			}
		}
		cancel()
		<-done
		ln.Close()
		if string(info.ServerName()) != "svc.example" || info.NumALPN() != 2 || string(info.ALPN(1)) != "x" {
			t.Fatalf("version %v: name %q, %d ALPN", v, info.ServerName(), info.NumALPN())
		}
		if h.Version() != uint32(v) {
			t.Fatalf("version %#x, want %v", h.Version(), v)
		}
		t.Logf("version %v: hello in %d datagrams", v, datagrams)
	}
}
