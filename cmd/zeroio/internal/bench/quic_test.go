package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/zeroio/zeroio/quicudp"
	"github.com/zeroio/zeroio/udp"
)

func BenchmarkQUIC(b *testing.B) { runSuite(b, "QUIC") }

// echoSize is what TestQUICOverZeroio moves each way.
const echoSize = 64 << 20

// TestQUICOverZeroio runs a real quic-go client and server over default
// zeroio sockets and echoes 64 MiB through one stream: what the server
// receives and what comes back hash as what was sent. Three shapes:
//   - packetconn: each end a *udp.Conn handed to quic.Transport as it is
//     (quic-go reads the socket itself, through x/net);
//   - connected: the client a *udp.Conn on a connected socket, read and
//     written as a net.Conn (its reads split GRO buffers);
//   - quicudp: each end through quicudp, so quic-go reads through zeroio's
//     batch reader with GRO on.
func TestQUICOverZeroio(t *testing.T) {
	for _, shape := range []struct{ name, srv, cli string }{
		{"packetconn", "zeroio-conn", "zeroio-conn"},
		{"connected", "zeroio-conn", "connected"},
		{"quicudp", "zeroio", "zeroio"},
	} {
		t.Run(shape.name, func(t *testing.T) {
			srvPC, err := quicEndpoint(shape.srv)
			if err != nil {
				t.Fatal(err)
			}
			var cliPC net.PacketConn
			if shape.cli == "connected" {
				uc, err := net.DialUDP("udp4", nil, srvPC.LocalAddr().(*net.UDPAddr))
				if err != nil {
					t.Fatal(err)
				}
				c, err := udp.NewConn(uc, nil)
				if err != nil {
					t.Fatal(err)
				}
				cliPC = connectedPacketConn{c}
			} else if cliPC, err = quicEndpoint(shape.cli); err != nil {
				t.Fatal(err)
			}
			l, err := dialQUIC(srvPC, cliPC)
			if err != nil {
				t.Fatal(err)
			}
			defer l.close()
			quicEcho(t, l)
			for end, pc := range map[string]net.PacketConn{"server": srvPC, "client": cliPC} {
				c := zeroioConn(pc)
				st := c.Stats()
				t.Logf("%s: %+v", end, st)
				switch {
				case shape.name == "quicudp" || (shape.name == "connected" && end == "client"):
					// zeroio reads: GRO on, and loopback hands quic-go's
					// GSO sends over coalesced.
					if kernelGRO() && (!st.GRO || st.GROReads == 0) {
						t.Errorf("%s: GRO unused by zeroio's own reads: %+v", end, st)
					}
				default:
					if st.GRO {
						t.Errorf("%s: GRO on with the socket handed to quic-go: %+v", end, st)
					}
				}
			}
		})
	}
}

// quicEcho sends echoSize pseudo-random bytes on one stream of l, which
// the server echoes, and checks the SHA-256 of what the server received
// and of what came back.
func quicEcho(t *testing.T, l *quicLink) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	served := make(chan []byte, 1)
	go func() {
		defer close(served)
		str, err := l.srv.AcceptStream(ctx)
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
	str, err := l.cli.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan []byte, 1)
	go func() {
		defer close(sent)
		h := sha256.New()
		src := io.LimitReader(rand.NewChaCha8([32]byte{'z', 'e', 'r', 'o'}), echoSize)
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
		t.Fatalf("%d of %d bytes back; server's hash matches %v, echo's %v", n, echoSize, bytes.Equal(got, want), bytes.Equal(back.Sum(nil), want))
	}
}

// zeroioConn returns the *udp.Conn under a PacketConn of the test.
func zeroioConn(pc net.PacketConn) *udp.Conn {
	switch c := pc.(type) {
	case *udp.Conn:
		return c
	case *quicudp.Conn:
		return c.Conn
	case connectedPacketConn:
		return c.c
	}
	panic("not a zeroio socket")
}

// connectedPacketConn gives quic-go a connected *udp.Conn as a plain
// net.PacketConn: it reads with Read and writes with Write, as a user of
// a connected socket does (WriteTo with an address fails on one).
type connectedPacketConn struct{ c *udp.Conn }

func (p connectedPacketConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, err := p.c.Read(b)
	return n, p.c.RemoteAddr(), err
}

func (p connectedPacketConn) WriteTo(b []byte, _ net.Addr) (int, error) { return p.c.Write(b) }
func (p connectedPacketConn) Close() error                              { return p.c.Close() }
func (p connectedPacketConn) LocalAddr() net.Addr                       { return p.c.LocalAddr() }
func (p connectedPacketConn) SetDeadline(t time.Time) error             { return p.c.SetDeadline(t) }
func (p connectedPacketConn) SetReadDeadline(t time.Time) error         { return p.c.SetReadDeadline(t) }
func (p connectedPacketConn) SetWriteDeadline(t time.Time) error        { return p.c.SetWriteDeadline(t) }
func (p connectedPacketConn) SetReadBuffer(n int) error                 { return p.c.SetReadBuffer(n) }
func (p connectedPacketConn) SetWriteBuffer(n int) error                { return p.c.SetWriteBuffer(n) }
