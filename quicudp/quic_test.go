package quicudp_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/zeroio/zeroio/quicudp"
	"github.com/zeroio/zeroio/udp"
)

// echoSize is what TestEcho moves each way.
const echoSize = 8 << 20

// testLB is the QUIC-LB layout of the tests' server.
var testLB = quicudp.LBConfig{ConfigID: 1, ServerID: []byte{0xbe, 0xef}, NonceLen: 8}

// TestEcho runs a real quic-go server and client, each on a *udp.Conn
// through quicudp, the server issuing QUIC-LB connection IDs. One stream
// carries echoSize pseudo-random bytes to the server and back: both
// directions hash as what was sent, and on Linux, where the kernel
// coalesces quic-go's GSO sends on loopback, both ends read GRO buffers.
func TestEcho(t *testing.T) {
	srvTLS, cliTLS := tlsConfigs(t)
	srv, cli := listen(t), listen(t)
	ln := serve(t, srv, srvTLS)
	conn := dial(t, cli, srv.LocalAddr(), cliTLS)
	echo(t, ln, conn)
	for end, c := range map[string]*quicudp.Conn{"server": srv, "client": cli} {
		st := c.Stats()
		t.Logf("%s: %+v", end, st)
		if runtime.GOOS == "linux" && st.GRO && st.GROReads == 0 {
			t.Errorf("%s: GRO on but no GRO buffer read: %+v", end, st)
		}
	}
}

// TestServerIDInEveryPacket puts a forwarder between client and server
// that reads the destination connection ID of every short-header packet
// the client sends: each carries the server's ID, as a load balancer
// routing by it would find.
func TestServerIDInEveryPacket(t *testing.T) {
	srvTLS, cliTLS := tlsConfigs(t)
	srv := listen(t)
	ln := serve(t, srv, srvTLS)
	fwd := newForwarder(t, srv.LocalAddr().(*net.UDPAddr))
	conn := dial(t, listen(t), fwd.front.LocalAddr(), cliTLS)
	echo(t, ln, conn)
	conn.CloseWithError(0, "")
	if n, bad := fwd.routed.Load(), fwd.unroutable.Load(); n == 0 || bad != 0 {
		t.Fatalf("%d short-header packets carried the server ID, %d did not", n, bad)
	}
}

// forwarder relays one client's datagrams to a server and back, and
// decodes the server ID of the client's short-header packets.
type forwarder struct {
	front, back        *net.UDPConn
	routed, unroutable atomic.Int64
}

func newForwarder(t *testing.T, srv *net.UDPAddr) *forwarder {
	front, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	back, err := net.DialUDP("udp4", nil, srv)
	if err != nil {
		front.Close()
		t.Fatal(err)
	}
	f := &forwarder{front: front, back: back}
	var client atomic.Pointer[net.UDPAddr]
	done := make(chan struct{}, 2)
	go func() { // client to server
		defer func() { done <- struct{}{} }()
		b := make([]byte, 65536)
		for {
			n, from, err := front.ReadFromUDP(b)
			if err != nil {
				return
			}
			client.Store(from)
			f.inspect(b[:n])
			back.Write(b[:n])
		}
	}()
	go func() { // server to client
		defer func() { done <- struct{}{} }()
		b := make([]byte, 65536)
		for {
			n, err := back.Read(b)
			if err != nil {
				return
			}
			if to := client.Load(); to != nil {
				front.WriteToUDP(b[:n], to)
			}
		}
	}()
	t.Cleanup(func() {
		front.Close()
		back.Close()
		<-done
		<-done
	})
	return f
}

func (f *forwarder) inspect(b []byte) {
	if len(b) == 0 || b[0]&0x80 != 0 { // long header: the handshake
		return
	}
	sid, err := quicudp.ServerID(b[1:], testLB.ConfigID, len(testLB.ServerID), testLB.NonceLen)
	if err == nil && bytes.Equal(sid, testLB.ServerID) {
		f.routed.Add(1)
	} else {
		f.unroutable.Add(1)
	}
}

// listen opens a *udp.Conn on loopback for quic-go, closed by the test.
func listen(t *testing.T) *quicudp.Conn {
	c, err := udp.Listen("udp4", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	qc := quicudp.New(c)
	t.Cleanup(func() { qc.Close() })
	return qc
}

// serve starts a quic-go server on c that issues QUIC-LB connection IDs.
func serve(t *testing.T, c *quicudp.Conn, srvTLS *tls.Config) *quic.Listener {
	gen, err := quicudp.NewCIDGenerator(testLB)
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: c, ConnectionIDGenerator: gen}
	t.Cleanup(func() { tr.Close() })
	ln, err := tr.Listen(srvTLS, quicConfig)
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// dial connects a quic-go client on c to addr.
func dial(t *testing.T, c *quicudp.Conn, addr net.Addr, cliTLS *tls.Config) *quic.Conn {
	tr := &quic.Transport{Conn: c}
	t.Cleanup(func() { tr.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := tr.Dial(ctx, addr, cliTLS, quicConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	return conn
}

// quicConfig lets a stream fill a loopback path: receive windows above
// quic-go's defaults.
var quicConfig = &quic.Config{
	InitialStreamReceiveWindow:     4 << 20,
	MaxStreamReceiveWindow:         16 << 20,
	InitialConnectionReceiveWindow: 6 << 20,
	MaxConnectionReceiveWindow:     24 << 20,
	MaxIdleTimeout:                 60 * time.Second,
}

// echo sends echoSize pseudo-random bytes on one stream of conn, which
// the server accepted on ln echoes, and checks the SHA-256 of what the
// server received and of what came back.
func echo(t *testing.T, ln *quic.Listener, conn *quic.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	served := make(chan []byte, 1)
	go func() {
		defer close(served)
		sc, err := ln.Accept(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		str, err := sc.AcceptStream(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		h := sha256.New()
		if _, err := io.Copy(str, io.TeeReader(str, h)); err != nil {
			t.Error(err)
			return
		}
		str.Close()
		served <- h.Sum(nil)
	}()
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan []byte, 1)
	go func() {
		defer close(sent)
		h := sha256.New()
		src := io.LimitReader(mrand.NewChaCha8([32]byte{'q', 'u', 'i', 'c'}), echoSize)
		if _, err := io.Copy(io.MultiWriter(str, h), src); err != nil {
			t.Error(err)
			return
		}
		str.Close()
		sent <- h.Sum(nil)
	}()
	back := sha256.New()
	n, err := io.Copy(back, str)
	if err != nil {
		t.Fatalf("after %d bytes back: %v", n, err)
	}
	want, got := <-sent, <-served
	if n != echoSize || want == nil || !bytes.Equal(got, want) || !bytes.Equal(back.Sum(nil), want) {
		t.Fatalf("%d of %d bytes back; server's hash matches %v, echo's %v",
			n, echoSize, bytes.Equal(got, want), bytes.Equal(back.Sum(nil), want))
	}
}

func tlsConfigs(t *testing.T) (srv, cli *tls.Config) {
	srv, cli, err := selfSigned()
	if err != nil {
		t.Fatal(err)
	}
	return srv, cli
}

// selfSigned returns a server and a client TLS configuration sharing a
// fresh self-signed certificate for "localhost".
func selfSigned() (srv, cli *tls.Config, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		DNSNames:     []string{"localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	const proto = "quicudp-test"
	srv = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, NextProtos: []string{proto}}
	cli = &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{proto}}
	return srv, cli, nil
}
