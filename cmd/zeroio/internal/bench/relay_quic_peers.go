package bench

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"

	"github.com/quic-go/quic-go"
)

// What the RelayQUIC suite runs besides quic-go clients: two quic-go
// servers (a farm), the relays in front of them, and a NAT shim that
// rebinds a client's source port.

// quicFarm is two quic-go servers on loopback with one certificate and
// one stateless reset key. A stream's first byte says what it wants:
// streamEcho, every byte back; streamSink, its bytes read to the end and one
// byte answered.
type quicFarm struct {
	trs [2]*quic.Transport
	lns [2]*quic.Listener
	cli *tls.Config
	wg  sync.WaitGroup
}

const (
	streamEcho = 'e'
	streamSink = 's'
)

// startQUICFarm starts the servers. They share a stateless reset key, as
// the servers behind one address do (RFC 9000 section 10.3): a server
// that gets a packet of a connection it does not hold resets it, and the
// client learns at once that a relay sent it to the wrong server rather
// than after an idle timeout.
func startQUICFarm() (*quicFarm, error) {
	srvTLS, cliTLS, err := quicTLS()
	if err != nil {
		return nil, err
	}
	return startQUICFarmWith([2]*tls.Config{srvTLS, srvTLS}, cliTLS)
}

// startQUICFarmWith starts the servers with a TLS config each.
func startQUICFarmWith(srvTLS [2]*tls.Config, cliTLS *tls.Config) (*quicFarm, error) {
	var key quic.StatelessResetKey
	rand.Read(key[:])
	f := &quicFarm{cli: cliTLS}
	for i := range f.trs {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			f.close()
			return nil, err
		}
		f.trs[i] = &quic.Transport{Conn: c, StatelessResetKey: &key}
		if f.lns[i], err = f.trs[i].Listen(srvTLS[i], quicConfig); err != nil {
			f.close()
			return nil, err
		}
		f.wg.Go(func() { f.accept(f.lns[i]) })
	}
	return f, nil
}

func (f *quicFarm) accept(ln *quic.Listener) {
	for {
		c, err := ln.Accept(context.Background())
		if err != nil {
			return
		}
		f.wg.Go(func() {
			for {
				s, err := c.AcceptStream(context.Background())
				if err != nil {
					return
				}
				f.wg.Go(func() { serveQUICStream(s) })
			}
		})
	}
}

func serveQUICStream(s *quic.Stream) {
	defer s.Close()
	mode := make([]byte, 1)
	if _, err := io.ReadFull(s, mode); err != nil {
		return
	}
	switch mode[0] {
	case streamEcho:
		io.Copy(s, s)
	case streamSink:
		if _, err := io.Copy(io.Discard, s); err == nil {
			s.Write([]byte{1})
		}
	}
}

// addrs are the servers' addresses.
func (f *quicFarm) addrs() []string {
	return []string{f.lns[0].Addr().String(), f.lns[1].Addr().String()}
}

// close stops the servers and waits for their goroutines: closing a
// transport closes its connections, which ends their streams.
func (f *quicFarm) close() {
	for i, tr := range f.trs {
		if tr == nil {
			continue
		}
		if f.lns[i] != nil {
			f.lns[i].Close()
		}
		tr.Close()
		tr.Conn.Close()
	}
	f.wg.Wait()
}

// startQUICRelay starts impl on a free loopback port in front of the
// targets: zeroio relay balancing round-robin (its default), nginx
// stream hashing the client's address and port (nginx) or round-robin
// (nginx-rr), the configurations nginx's users run for QUIC.
func startQUICRelay(impl string, targets []string) (*relayProc, error) {
	if impl == "nginx" || impl == "nginx-rr" {
		var up strings.Builder
		up.WriteString("\tupstream quic {\n")
		if impl == "nginx" {
			up.WriteString("\t\thash $remote_addr$remote_port consistent;\n")
		}
		for _, t := range targets {
			fmt.Fprintf(&up, "\t\tserver %s;\n", t)
		}
		up.WriteString("\t}\n")
		return startNginxStreamConf("quic", up.String())
	}
	port, err := freePort("udp")
	if err != nil {
		return nil, err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{"udp://" + listen}
	for _, t := range targets {
		args = append(args, "udp://"+t)
	}
	bound := func(exited <-chan struct{}) bool { return waitOrExit(exited, func() bool { return udpBound(port) }) }
	return startZeroioUntil(impl, listen, bound, args...)
}

// rebinder stands for a NAT between a client and the relay that gives
// the client's flow a new source port once, after the client's first
// after datagrams: the client sends to front, and each datagram leaves
// from the newest of the rebinder's upstream sockets; replies to any of
// them go back to the client.
type rebinder struct {
	front *net.UDPConn
	to    netip.AddrPort
	after int

	mu     sync.Mutex
	client netip.AddrPort
	ups    []*net.UDPConn
	n      int
	closed bool // no new upstream sockets: close has closed those there are
	wg     sync.WaitGroup
}

func newRebinder(to netip.AddrPort, after int) (*rebinder, error) {
	front, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	r := &rebinder{front: front, to: to, after: after}
	r.wg.Go(r.run)
	return r, nil
}

func (r *rebinder) run() {
	buf := make([]byte, 65536)
	for {
		n, from, err := r.front.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		r.mu.Lock()
		r.client = from
		if !r.closed && (r.n == 0 || r.n == r.after) {
			u, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err == nil {
				r.ups = append(r.ups, u)
				r.wg.Go(func() { r.back(u) })
			}
		}
		r.n++
		var up *net.UDPConn
		if len(r.ups) > 0 {
			up = r.ups[len(r.ups)-1]
		}
		r.mu.Unlock()
		if up != nil {
			up.WriteToUDPAddrPort(buf[:n], r.to)
		}
	}
}

// back passes the relay's replies on u back to the client.
func (r *rebinder) back(u *net.UDPConn) {
	buf := make([]byte, 65536)
	for {
		n, err := u.Read(buf)
		if err != nil {
			return
		}
		r.mu.Lock()
		client := r.client
		r.mu.Unlock()
		r.front.WriteToUDPAddrPort(buf[:n], client)
	}
}

// rebound reports whether the client's flow has moved to a new port.
func (r *rebinder) rebound() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ups) > 1
}

func (r *rebinder) close() {
	r.front.Close()
	r.mu.Lock()
	r.closed = true
	for _, u := range r.ups {
		u.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
