package relay

import (
	"sync/atomic"

	"github.com/zeroio/zeroio/internal/evloop"
	"github.com/zeroio/zeroio/internal/nbsys"
	"golang.org/x/sys/unix"
)

// dir is one direction of an evConn. Small transfers go through a pooled
// buffer with read(2) and write(2), held only while bytes wait in it; a
// direction that keeps filling the buffer switches to splice(2) through
// a pipe of its loop's, held only while bytes wait in it.
type dir struct {
	buf      []byte      // pooled; nil when empty
	off, end int         // bytes waiting in buf
	pipe     evloop.Pipe // if hasPipe
	hasPipe  bool
	inPipe   int        // bytes waiting in the pipe
	full     uint8      // reads in a row that filled buf
	spliced  bool       // the flow proved bulky
	eof      bool       // the source ended
	rerr     unix.Errno // the source failed after bytes still in buf
	shut     bool       // the destination's writing side is shut down (or need not be)
	hdr      uint8      // leading bytes of buf that are the outgoing PROXY header, not counted as the client's
}

const (
	bufSize = 16 << 10
	// bulkReads full reads in a row prove a flow bulky: it then moves
	// through a pipe, without copying through user space.
	bulkReads = 4
	// spliceFlags: neither side blocks, and pages move rather than
	// copy where the kernel can.
	spliceFlags = unix.SPLICE_F_NONBLOCK | unix.SPLICE_F_MOVE
)

// getBuf, getBufN and putBuf take and give back a buffer of l's.
func (l *loop) getBuf() []byte { return l.bufs.Get(bufSize) }

func (l *loop) getBufN(n int) []byte { return l.bufs.Get(n) }

func (l *loop) putBuf(b []byte) { l.bufs.Put(b) }

// finished reports whether d has passed on its source's end.
func (d *dir) finished() bool { return d.eof && d.end == d.off && d.inPipe == 0 }

// release gives back d's buffer and pipe.
func (d *dir) release(l *loop) {
	if d.buf != nil {
		l.putBuf(d.buf)
	}
	if d.hasPipe {
		l.pipes.Put(d.pipe, d.inPipe)
	}
	*d = dir{}
}

// pumpAll moves bytes both ways until every move would block, and ends
// the connection when both directions have finished or one failed.
func (c *evConn) pumpAll() {
	st := &c.rt.st
	if e := c.pump(&c.up, &c.down, c.cfd, c.tfd, &c.cR, &c.tW, c.cHup, &st.bytesUp, &c.upN); e != 0 {
		// Typically the target closed and reset at the client's next
		// bytes. What it sent before (a server's goodbye: an error
		// reply, SMTP's 421) is still read and given to the client, as
		// far as it takes it now, before both close: the target's
		// socket keeps those bytes readable after the reset. Their
		// edges may not have been seen yet: both sockets are tried.
		c.tR, c.cW = true, true
		c.pump(&c.down, &c.up, c.tfd, c.cfd, &c.tR, &c.cW, c.tHup, &st.bytesDown, &c.downN)
		c.finish(e)
		return
	}
	if e := c.pump(&c.down, &c.up, c.tfd, c.cfd, &c.tR, &c.cW, c.tHup, &st.bytesDown, &c.downN); e != 0 {
		c.finish(e)
		return
	}
	if c.endFirst == 0 {
		if c.up.eof {
			c.endFirst = endClientClosed
		} else if c.down.eof {
			c.endFirst = endTargetClosed
		}
	}
	if c.up.finished() && c.down.finished() {
		c.finish(nil)
	}
}

// pump moves d from src to dst while both are ready. At the source's end
// it shuts down writing on dst, passing the half-close on while the other
// direction keeps flowing, unless that direction has finished too: then
// closing both sockets says the same. It returns the errno that ends the
// connection, or 0.
func (c *evConn) pump(d, other *dir, src, dst int, srcR, dstW *bool, srcHup bool, count *atomic.Uint64, mine *uint64) unix.Errno {
	l := c.lp
	for {
		switch {
		case d.inPipe > 0:
			if !*dstW {
				return 0
			}
			n, e := nbsys.Splice(d.pipe.R, dst, d.inPipe, spliceFlags)
			if e != 0 {
				if e == unix.EAGAIN {
					*dstW = false
					return 0
				}
				if e == unix.EINTR {
					continue
				}
				return e
			}
			d.inPipe -= n
			count.Add(uint64(n))
			*mine += uint64(n)
			c.last = l.now
			if d.inPipe == 0 {
				l.pipes.Put(d.pipe, 0)
				d.hasPipe = false
			}
		case d.end > d.off:
			if !*dstW {
				return 0
			}
			var n int
			var e unix.Errno
			if d.eof {
				// The source's end is known: hold these bytes for the
				// FIN that shutdown or close sends next, so that both
				// leave in one segment.
				n, e = nbsys.SendMore(dst, d.buf[d.off:d.end])
			} else {
				n, e = nbsys.Write(dst, d.buf[d.off:d.end])
			}
			if e != 0 {
				if e == unix.EAGAIN {
					*dstW = false
					return 0
				}
				if e == unix.EINTR {
					continue
				}
				return e
			}
			d.off += n
			c.last = l.now
			if d.hdr > 0 {
				// The header is the relay's, not the client's: the
				// byte counts are the client's stream, as the
				// goroutine engine's.
				h := min(n, int(d.hdr))
				d.hdr -= uint8(h)
				n -= h
			}
			count.Add(uint64(n))
			*mine += uint64(n)
			if d.off == d.end {
				d.off, d.end = 0, 0
				l.putBuf(d.buf)
				d.buf = nil
			}
		case d.rerr != 0:
			return d.rerr
		case d.eof:
			if !d.shut {
				d.shut = true
				if !other.finished() {
					// ENOTCONN: the peer reset already; its own
					// direction reports it.
					if e := nbsys.ShutdownWrite(dst); e != 0 && e != unix.ENOTCONN {
						return e
					}
				}
			}
			return 0
		case !*srcR:
			return 0
		case d.spliced:
			if !d.hasPipe {
				p, e := l.pipes.Get()
				if e != 0 {
					d.spliced = false // out of descriptors: copy instead
					continue
				}
				d.pipe, d.hasPipe = p, true
			}
			n, e := nbsys.Splice(src, d.pipe.W, pipeSize, spliceFlags)
			if e != 0 {
				if e == unix.EAGAIN {
					*srcR = false
					l.pipes.Put(d.pipe, 0)
					d.hasPipe = false
					return 0
				}
				if e == unix.EINTR {
					continue
				}
				return e
			}
			if n == 0 {
				d.eof = true
				l.pipes.Put(d.pipe, 0)
				d.hasPipe = false
				continue
			}
			d.inPipe = n
		default:
			if d.buf == nil {
				d.buf = l.getBuf()
			}
			n, e := nbsys.Read(src, d.buf)
			if e != 0 {
				if e == unix.EAGAIN {
					*srcR = false
					l.putBuf(d.buf)
					d.buf = nil
					return 0
				}
				if e == unix.EINTR {
					continue
				}
				return e
			}
			if n == 0 {
				d.eof = true
				l.putBuf(d.buf)
				d.buf = nil
				continue
			}
			d.off, d.end = 0, n
			if n < len(d.buf) {
				// A stream socket's read returns all it holds, up to
				// the buffer: a short read drained it, and new bytes
				// will raise a new edge. This saves the read that
				// would return EAGAIN. Not once the peer's FIN has
				// been reported: it may wait behind the bytes, and no
				// new edge would come for it; it is read now instead.
				if srcHup {
					d.readToEnd(src, len(d.buf))
				} else {
					*srcR = false
				}
				d.full = 0
			} else if d.full++; d.full >= bulkReads {
				d.spliced = true
			}
		}
	}
}

// readToEnd reads on after a short read from a source whose FIN has been
// reported, into the rest of d.buf, to find the end of the stream before
// the bytes are written on: they then leave with the FIN in one segment
// (MSG_MORE and shutdown, as HAProxy sends them), and the peer
// acknowledges both at once. A read error is kept in d.rerr, to end the
// connection once the bytes read before it are passed on. It reads up to
// d.buf[:lim].
func (d *dir) readToEnd(src, lim int) {
	for d.end < lim {
		n, e := nbsys.Read(src, d.buf[d.end:lim])
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			return
		case e != 0:
			d.rerr = e
			return
		case n == 0:
			d.eof = true
			return
		}
		d.end += n
	}
}

// readAhead reads what the client has sent already, before the dial, so
// that the target's socket knows at connect time that bytes wait for it
// (see connectTo). It returns the error that ends the client, if any; the
// client's end is kept in d.eof. srcHup is as for pump: a client that
// waited for a slot may have had its FIN reported already. As readProxy
// and readHello, it leaves room for an outgoing PROXY header
// (queueProxyHeader) at the end of the buffer.
func (d *dir) readAhead(l *loop, src int, srcR *bool, srcHup bool) unix.Errno {
	if d.end > d.off || d.eof {
		return 0 // a ClientHello or the bytes after a PROXY header
	}
	if d.buf == nil {
		d.buf = l.getBuf()
	}
	lim := len(d.buf) - proxyReserve
	n, e := nbsys.Read(src, d.buf[:lim])
	if e == 0 && n > 0 {
		d.off, d.end = 0, n
		if n < lim {
			// Drained, as in pump; the FIN, if reported, is read now.
			if srcHup {
				d.readToEnd(src, lim)
			} else {
				*srcR = false
			}
		}
		return 0
	}
	l.putBuf(d.buf)
	d.buf = nil
	switch e {
	case 0:
		d.eof = true
	case unix.EAGAIN, unix.EINTR:
		// Nothing yet; the socket's readiness, reported on its
		// registration, comes with the bytes.
		*srcR = false
	default:
		return e
	}
	return 0
}
