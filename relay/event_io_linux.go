package relay

import (
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
