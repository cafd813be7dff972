package bench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/zeroio/zeroio/quicudp"
	"github.com/zeroio/zeroio/udp"
)

// The QUIC suite: quic-go moving bulk data over loopback, one stream per
// op, client and server in this process, both on the same kind of socket:
//   - stdlib: *net.UDPConn, as quic-go users have it;
//   - zeroio-conn: a default *udp.Conn handed to quic-go as it is (quic-go
//     reads the socket itself, so GRO is off: it should tie stdlib);
//   - zeroio: a *udp.Conn through quicudp, so quic-go reads through
//     zeroio's batch reader with GRO on.
//
// quic-go sends with GSO either way. The metrics are the throughput and
// the process's CPU seconds per GiB moved (client and server together).

// quicImpls are the sockets the suite compares.
var quicImpls = []string{"stdlib", "zeroio-conn", "zeroio"}

func quicCases(sc Scale) []Case {
	size := 16 << 20
	if sc == Quick {
		size = 4 << 20
	}
	var cs []Case
	for _, impl := range quicImpls {
		cs = append(cs, Case{fmt.Sprintf("size=%d/impl=%s", size, impl), func(b *testing.B) {
			runQUIC(b, impl, size)
		}})
	}
	return cs
}

func runQUIC(b *testing.B, impl string, size int) {
	srvPC, err := quicEndpoint(impl)
	if err != nil {
		fatal(b, err)
	}
	cliPC, err := quicEndpoint(impl)
	if err != nil {
		srvPC.Close()
		fatal(b, err)
	}
	l, err := dialQUIC(srvPC, cliPC)
	if err != nil {
		fatal(b, err)
	}
	defer l.close()
	srvErr := make(chan error, 1)
	go func() { srvErr <- l.sink() }()
	data := make([]byte, 1<<20)
	rand.Read(data)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b.ReportAllocs()
	b.SetBytes(int64(size))
	cpu0 := procCPU(os.Getpid())
	b.ResetTimer()
	for range b.N {
		if err := l.upload(ctx, data, size); err != nil {
			fatal(b, err)
		}
	}
	b.StopTimer()
	if cpu := procCPU(os.Getpid()) - cpu0; cpu > 0 {
		b.ReportMetric(cpu/(float64(b.N)*float64(size)/(1<<30)), "cpu-s/GiB")
	}
	l.cli.CloseWithError(0, "")
	if err := <-srvErr; err != nil && !isQUICClosed(err) {
		fatal(b, err)
	}
}

// quicEndpoint opens a socket on 127.0.0.1 as impl has it.
func quicEndpoint(impl string) (net.PacketConn, error) {
	switch impl {
	case "stdlib":
		return net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	case "zeroio-conn", "zeroio":
		c, err := udp.Listen("udp4", "127.0.0.1:0", nil)
		if err != nil || impl == "zeroio-conn" {
			return c, err
		}
		return quicudp.New(c), nil
	}
	return nil, fmt.Errorf("no QUIC endpoint %q", impl)
}

// quicLink is a QUIC connection between two transports in this process.
type quicLink struct {
	srvTr, cliTr *quic.Transport
	ln           *quic.Listener
	cli, srv     *quic.Conn
}

// quicConfig lets a stream fill a loopback path: receive windows well
// above quic-go's defaults, so that flow control does not bound the
// throughput before the sockets do.
var quicConfig = &quic.Config{
	InitialStreamReceiveWindow:     8 << 20,
	MaxStreamReceiveWindow:         32 << 20,
	InitialConnectionReceiveWindow: 12 << 20,
	MaxConnectionReceiveWindow:     48 << 20,
	MaxIdleTimeout:                 60 * time.Second,
}

// dialQUIC connects a client on cliPC to a server on srvPC. The link owns
// both sockets.
func dialQUIC(srvPC, cliPC net.PacketConn) (*quicLink, error) {
	srvTLS, cliTLS, err := quicTLS()
	if err != nil {
		srvPC.Close()
		cliPC.Close()
		return nil, err
	}
	l := &quicLink{srvTr: &quic.Transport{Conn: srvPC}, cliTr: &quic.Transport{Conn: cliPC}}
	if l.ln, err = l.srvTr.Listen(srvTLS, quicConfig); err != nil {
		l.close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	accepted := make(chan error, 1)
	go func() {
		var err error
		l.srv, err = l.ln.Accept(ctx)
		accepted <- err
	}()
	if l.cli, err = l.cliTr.Dial(ctx, srvPC.LocalAddr(), cliTLS, quicConfig); err != nil {
		<-accepted
		l.close()
		return nil, err
	}
	if err := <-accepted; err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

func (l *quicLink) close() {
	for _, c := range []*quic.Conn{l.cli, l.srv} {
		if c != nil {
			c.CloseWithError(0, "")
		}
	}
	if l.ln != nil {
		l.ln.Close()
	}
	for _, tr := range []*quic.Transport{l.cliTr, l.srvTr} {
		tr.Close()
		tr.Conn.Close()
	}
}

// sink serves the client's upload streams: it reads each to its end and
// answers with one byte. It returns when the connection closes.
func (l *quicLink) sink() error {
	for {
		str, err := l.srv.AcceptStream(context.Background())
		if err != nil {
			return err
		}
		if _, err := io.Copy(io.Discard, str); err != nil {
			return err
		}
		if _, err := str.Write([]byte{1}); err != nil {
			return err
		}
		str.Close()
	}
}

// upload sends size bytes (data repeated) on a new stream and waits for
// the server to have read them all.
func (l *quicLink) upload(ctx context.Context, data []byte, size int) error {
	return quicUpload(ctx, l.cli, nil, data, size)
}

// quicUpload is upload on c, the stream opened by head (nil: nothing)
// before the size bytes.
func quicUpload(ctx context.Context, c *quic.Conn, head, data []byte, size int) error {
	str, err := c.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	if _, err := str.Write(head); err != nil {
		return err
	}
	for left := size; left > 0; {
		n := min(left, len(data))
		if _, err := str.Write(data[:n]); err != nil {
			return err
		}
		left -= n
	}
	str.Close()
	ack := make([]byte, 2)
	if n, err := io.ReadFull(str, ack[:1]); n != 1 {
		return fmt.Errorf("no acknowledgement of the upload: %v", err)
	}
	return nil
}

// isQUICClosed reports the errors a connection closed by either end gives.
func isQUICClosed(err error) bool {
	var ae *quic.ApplicationError
	return errors.As(err, &ae) || errors.Is(err, net.ErrClosed) || errors.Is(err, quic.ErrTransportClosed)
}

// quicTLS returns a server and a client TLS configuration sharing a fresh
// self-signed certificate for "localhost".
func quicTLS() (srv, cli *tls.Config, err error) {
	cert, x, err := quicCert("", "localhost")
	if err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(x)
	srv = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{quicProto}}
	cli = &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{quicProto}}
	return srv, cli, nil
}

const quicProto = "zeroio-bench"

// quicCert returns a self-signed ECDSA P-256 certificate for names, with
// common name cn.
func quicCert(cn string, names ...string) (tls.Certificate, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     names,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	x, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, x, nil
}

func init() {
	register(Suite{Group: "quic", Name: "QUIC", Cases: quicCases, Metric: "MB/s", AlsoChart: []string{"cpu-s/GiB"}})
}
