package relay

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeroio/zeroio/internal/proxyproto"
	"github.com/zeroio/zeroio/internal/tlshello"
)

// The goroutine engine's connection: the stream's steps (stream) taken
// with blocking reads under deadlines.

// pair is one relayed stream connection: client and target.
type pair struct {
	stream
	e      *goroutineEngine
	client net.Conn
	target net.Conn
	pre    []byte // the bytes read to choose the route, for the target

	mu      sync.Mutex
	aborted bool
	why     error
	cancel  context.CancelFunc // ends the dial to the target
	last    atomic.Int64       // mono when a chunk last moved
	timer   *time.Timer

	// What Streams shows of the pair, which other goroutines read: the
	// bytes the relay moved each way (added to stream's upN and downN
	// at its end), and the stream as it was at its last step (publish).
	upA, downA atomic.Uint64
	seen       atomic.Pointer[stream]
	// For paced directions (pacedCopy): stop is closed by abort to end
	// their waits, and waiting counts the directions waiting for their
	// rate: the pair is not idle meanwhile.
	stop    chan struct{}
	waiting atomic.Int32
}

func addrPort(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case *net.UDPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

// run serves an accepted connection: connect sets it up, then the relay
// runs on a goroutine of its own. connect's frame is large (1.6 KB: the
// dialer, the PROXY header buffers); with the copy waiting below it, a
// direction needed an 8 KiB stack for as long as the connection lived. On
// a fresh goroutine each direction waits in the initial 4 KiB stack, which
// is what an idle connection costs (the relay idle benchmark measures the
// RSS per connection).
func (p *pair) run() {
	if why, ok := p.connect(); !ok {
		p.finish(why)
		return
	}
	go func() {
		p.finish(p.relay())
	}()
}

// finish ends the stream (stream.end) and gives back what the pair held:
// its slots under the limits and its place among the server's
// connections.
func (p *pair) finish(why error) {
	p.end(why, mono())
	p.release()
	p.e.untrack(p)
	p.rt.srv.connWG.Done()
}

// connect applies the route's policy to the client (PROXY header, access
// lists, per-client limit) and dials the target. It reports whether to
// relay; if not, it has closed what it opened, and why is how the
// stream ended.
func (p *pair) connect() (why error, ok bool) {
	if !p.policy() {
		p.client.Close()
		return errQuiet, false
	}
	t, ok := p.dial()
	if !ok {
		return errQuiet, false
	}
	if err := p.prelude(t); err != nil {
		// The target reset before its first bytes: the relay ends as
		// one a reset ends later does.
		p.client.Close()
		t.Close()
		return err, false
	}
	p.debug("relaying")
	return nil, true
}

// policy takes the client's PROXY header (unless the front read it),
// then applies the access lists and the per-client limit. On false the
// caller closes the client.
func (p *pair) policy() bool {
	setKeepAlive(p.client, p.cfg)
	return p.readProxy() && p.admitClient()
}

// readProxy reads the client's PROXY header, if it is still to be read,
// with a blocking read under the header timeout. It reports false, the
// client to be closed, when the header is refused or cannot be read.
func (p *pair) readProxy() bool {
	if !p.needsProxy() {
		return true
	}
	if !p.proxyPeer() {
		return false
	}
	p.client.SetReadDeadline(time.Now().Add(p.cfg.ProxyHeaderTimeout))
	h, err := proxyproto.ReadHeader(p.client)
	p.client.SetReadDeadline(time.Time{})
	if err != nil {
		if !p.isAborted() { // else Close or the shutdown deadline closed the client
			p.proxyFailed(err)
		}
		return false
	}
	p.gotProxy(&h)
	return true
}

// dial connects to one of the route's targets (dialTarget). abort
// cancels the dial, so that Close and Shutdown's deadline do not wait out
// DialTimeout for a target that does not answer. On false it has closed
// what it opened.
func (p *pair) dial() (net.Conn, bool) {
	rt := p.rt
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.mu.Lock()
	p.cancel = cancel
	aborted := p.aborted
	p.mu.Unlock()
	if aborted { // Shutdown closed the client already
		return nil, false
	}
	t, b, err := rt.dialTarget(ctx, p.cfg, p.src.Addr())
	p.mu.Lock()
	aborted = p.aborted
	if err == nil && !aborted { // else nothing is relayed to b
		p.target = t
		p.relayTo(b)
		p.publish()
	}
	p.mu.Unlock()
	if aborted { // Shutdown closed the client while we dialed
		if t != nil {
			t.Close()
		}
		return nil, false
	}
	if err != nil {
		p.noTarget()
		p.client.Close()
		return nil, false
	}
	return t, true
}

// prelude sets Nagle if asked and writes to the target what goes before
// the client's bytes: the PROXY header, then the bytes read to choose
// the route (the ClientHello, and what came with it), unchanged.
func (p *pair) prelude(t net.Conn) error {
	r := p.cfg
	if r.Nagle {
		setNoDelay(p.client, false)
		setNoDelay(t, false)
	}
	if r.SendProxy != 0 {
		var buf [maxProxyHeader]byte
		if _, err := t.Write(p.appendProxyHeader(buf[:0])); err != nil {
			return err
		}
	}
	if len(p.pre) > 0 {
		n, err := t.Write(p.pre)
		p.rt.st.bytesUp.Add(uint64(n))
		p.upN += uint64(n)
		p.pre = nil
		return err
	}
	return nil
}

// helloBufs holds the buffers the goroutine engine reads hellos into.
var helloBufs = sync.Pool{New: func() any { return new([tlshello.DefaultMaxLen]byte) }}

// readHello reads, with blocking reads under deadlines, what p's front
// needs to choose its route: the PROXY header if the front takes one,
// then the ClientHello, up to its bound and the peek timeout. It returns
// the route, or nil (counted) when the client is to be closed. The bytes
// it read, the hello and anything after it, are in p.pre.
func (p *pair) readHello(t *routeTable) *route {
	c, r := p.client, p.cfg
	if !p.readProxy() {
		return nil
	}
	buf := helloBufs.Get().(*[tlshello.DefaultMaxLen]byte)
	defer helloBufs.Put(buf)
	var h tlshello.Info
	c.SetReadDeadline(time.Now().Add(r.PeekTimeout))
	n := 0
	perr := error(tlshello.ErrNeedMore)
	for perr == tlshello.ErrNeedMore {
		m, err := c.Read(buf[n:])
		n += m
		if m > 0 {
			perr = tlshello.Parse(buf[:n], &h)
			continue
		}
		if err != nil {
			why := helloClosed
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				why = helloTimeout
			case n > 0:
				why = helloMalformed // ended inside a hello
			}
			p.helloFailed(why, nil)
			return nil
		}
	}
	c.SetReadDeadline(time.Time{})
	rt := p.chose(t, &h, perr)
	if rt != nil {
		p.pre = append([]byte(nil), buf[:n]...)
	}
	return rt
}
