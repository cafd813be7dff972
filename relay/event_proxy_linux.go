package relay

import (
	"errors"
	"io"

	"github.com/zeroio/zeroio/internal/evloop"
	"github.com/zeroio/zeroio/internal/nbsys"
	"github.com/zeroio/zeroio/internal/proxyproto"
	"golang.org/x/sys/unix"
)

// The PROXY protocol in the event engine: the header a client's proxy
// sends first, read in the loop, and the one the route sends its target.

// proxyReserve keeps room in the first buffer for an outgoing PROXY
// header before the bytes that followed the incoming one.
const proxyReserve = len(evConn{}.hdr)

// readProxy reads the client's PROXY header into the up direction's
// buffer; bytes after it stay there for the target.
func (c *evConn) readProxy() {
	d := &c.up
	if d.buf == nil {
		if c.front != nil {
			d.buf = c.lp.getBufN(helloBufSize)
		} else {
			d.buf = c.lp.getBuf()
		}
	}
	for {
		space := d.buf[d.end : min(len(d.buf), bufSize)-proxyReserve]
		if len(space) == 0 {
			c.proxyError(errHeaderTooLong)
			return
		}
		n, e := nbsys.Read(c.cfd, space)
		switch {
		case e == unix.EAGAIN:
			c.cR = false
			return
		case e == unix.EINTR:
			continue
		case e != 0:
			c.proxyError(e)
			return
		case n == 0:
			c.proxyError(io.ErrUnexpectedEOF)
			return
		}
		d.end += n
		h, hn, err := proxyproto.Parse(d.buf[:d.end])
		if errors.Is(err, io.ErrUnexpectedEOF) {
			continue
		}
		if err != nil {
			c.proxyError(err)
			return
		}
		d.off = hn
		c.gotProxy(&h)
		if c.rt == nil { // a front's client: the hello chooses the route
			l := c.lp
			c.state = stHello
			l.wheel.arm(c, evloop.After(l.now, c.cfg.PeekTimeout), l.now)
			c.readHello()
			return
		}
		c.policy()
		return
	}
}

var errHeaderTooLong = errors.New("PROXY header longer than the buffer")

// proxyError ends a client whose PROXY header could not be read
// (stream.proxyFailed).
func (c *evConn) proxyError(err error) {
	c.proxyFailed(err)
	c.finish(errQuiet)
}

// queueProxyHeader puts the outgoing PROXY header before any bytes the
// up direction holds.
func (c *evConn) queueProxyHeader() {
	if !c.dstKnown {
		c.dst = nbsys.LocalAddr(c.cfd)
	}
	h := c.appendProxyHeader(c.hdr[:0])
	d := &c.up
	if d.buf == nil {
		d.buf = c.lp.getBuf()
	}
	if d.off >= len(h) {
		d.off -= len(h)
	} else {
		copy(d.buf[len(h):], d.buf[d.off:d.end])
		d.end += len(h) - d.off
		d.off = 0
	}
	copy(d.buf[d.off:], h)
	d.hdr = uint8(len(h))
}
