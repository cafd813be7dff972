package interop

import (
	"bufio"
	"bytes"
	"net"
	"testing"
	"time"

	pp "github.com/pires/go-proxyproto"

	"github.com/zeroio/zeroio/relay"
)

// TestUDPProxyHeadersWithGoProxyproto checks zeroio's per-datagram PROXY
// v2 headers against an independent implementation, pires/go-proxyproto:
// a datagram whose header go-proxyproto wrote goes through a UDP route
// that accepts and sends headers, and the target parses what arrives with
// go-proxyproto. The client, the address it sent to and the UDP transport
// must come through.
func TestUDPProxyHeadersWithGoProxyproto(t *testing.T) {
	target, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	srv, err := relay.New(relay.Config{Routes: []relay.Route{{Name: "u",
		Listen:      relay.Addr{Network: "udp", Address: "127.0.0.1:0"},
		Target:      relay.Addr{Network: "udp", Address: target.LocalAddr().String()},
		AcceptProxy: true, SendProxy: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	src := &net.UDPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 4444}
	dst := &net.UDPAddr{IP: net.IPv4(203, 0, 113, 1), Port: 443}
	hdr, err := pp.HeaderProxyFromAddrs(2, src, dst).Format()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUDP("udp4", nil, srv.Addrs("u")[0].(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	payload := []byte("datagram payload")
	if _, err := c.Write(append(hdr, payload...)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	target.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := target.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(bytes.NewReader(buf[:n]))
	h, err := pp.Read(r)
	if err != nil {
		t.Fatalf("go-proxyproto cannot read the relay's header: %v", err)
	}
	if h.Version != 2 || h.TransportProtocol != pp.UDPv4 || h.SourceAddr.String() != src.String() || h.DestinationAddr.String() != dst.String() {
		t.Fatalf("header %+v: want v2 UDPv4 from %v to %v", h, src, dst)
	}
	rest := make([]byte, len(payload)+1)
	if k, _ := r.Read(rest); !bytes.Equal(rest[:k], payload) {
		t.Fatalf("payload %q, want %q", rest[:k], payload)
	}
}
