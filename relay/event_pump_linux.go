package relay

import (
	"sync/atomic"

	"github.com/zeroio/zeroio/internal/nbsys"
	"golang.org/x/sys/unix"
)

// Moving bytes, after internal/poll's splice loop: a direction (dir) is
// filled from its source by one of two halves, into a pooled buffer
// (bufIn, read(2)) or into a pipe once the flow proved bulky (pipeIn,
// splice(2)), and emptied into its destination by the matching half
// (bufOut, pipeOut). pump runs them in turn until each would block.
//
// Invariants of a dir, which every step keeps:
//   - At most one of buf and pipe holds bytes: buf[off:end], or inPipe
//     bytes in pipe. A step fills only an empty dir, so bytes leave in
//     the order they came.
//   - buf is held (non-nil) only while bytes wait in it, and pipe
//     (hasPipe) only while bytes wait in it: a step whose source drained
//     or ended gives them back, so an idle connection holds neither. (A
//     call retried after EINTR keeps them; one that failed otherwise
//     leaves them to release, as the connection ends.)
//   - eof and rerr are set only once the source ended or failed; bytes
//     read before stay and are passed on first.
//   - A ready flag (srcR, dstW) is cleared only by EAGAIN, or by a short
//     read that drained a stream socket: edge-triggered epoll then
//     reports the socket again when it is ready.

// flow is one direction of c as pump moves it: d's bytes go from src to
// dst, and other is the opposite direction.
type flow struct {
	d, other   *dir
	src, dst   int
	srcR, dstW *bool          // the source readable, the destination writable
	srcHup     bool           // the source's FIN (or reset) has been reported
	count      *atomic.Uint64 // the route's byte counter
	mine       *uint64        // the connection's
	dir        int            // dirUp or dirDown, for pacing
	paced      bool           // the direction has a rate (stream.pace)
	most       int            // the most one fill step reads: pipeSize, or what the rate lets through
}

// upFlow and downFlow are c's directions: client to target, and back.
func (c *evConn) upFlow() flow {
	return flow{d: &c.up, other: &c.down, src: c.cfd, dst: c.tfd, srcR: &c.cR, dstW: &c.tW,
		srcHup: c.cHup, count: &c.rt.st.bytesUp, mine: &c.upN, dir: dirUp, paced: c.pace.on[dirUp], most: pipeSize}
}

func (c *evConn) downFlow() flow {
	return flow{d: &c.down, other: &c.up, src: c.tfd, dst: c.cfd, srcR: &c.tR, dstW: &c.cW,
		srcHup: c.tHup, count: &c.rt.st.bytesDown, mine: &c.downN, dir: dirDown, paced: c.pace.on[dirDown], most: pipeSize}
}

// pumpAll moves bytes both ways until every move would block, and ends
// the connection when both directions have finished or one failed.
func (c *evConn) pumpAll() {
	up, down := c.upFlow(), c.downFlow()
	if e := c.pump(&up); e != 0 {
		// Typically the target closed and reset at the client's next
		// bytes. What it sent before (a server's goodbye: an error
		// reply, SMTP's 421) is still read and given to the client, as
		// far as it takes it now, before both close: the target's
		// socket keeps those bytes readable after the reset. Their
		// edges may not have been seen yet: both sockets are tried.
		c.tR, c.cW = true, true
		c.pump(&down)
		c.finish(e)
		return
	}
	if e := c.pump(&down); e != 0 {
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

// pump moves f's bytes while its source and destination are ready:
// bytes waiting go out first, then the source's end is passed on, then
// the source is read again. It returns the errno that ends the
// connection, or 0 once a step would block or the end was passed on.
func (c *evConn) pump(f *flow) unix.Errno {
	for {
		var more bool
		var e unix.Errno
		switch d := f.d; {
		case d.inPipe > 0:
			more, e = c.pipeOut(f)
		case d.end > d.off:
			more, e = c.bufOut(f)
		case d.rerr != 0:
			return d.rerr
		case d.eof:
			return f.passEnd()
		case !*f.srcR:
			return 0
		case f.paced:
			more, e = c.pacedIn(f)
		case d.spliced:
			more, e = c.pipeIn(f)
		default:
			more, e = c.bufIn(f)
		}
		if !more {
			return e
		}
	}
}

// retry sorts the errno of a step's failed call: EINTR is tried again
// (more), EAGAIN clears the socket's ready flag and stops the pump until
// its next edge, and anything else ends the connection.
func retry(e unix.Errno, ready *bool) (more bool, _ unix.Errno) {
	switch e {
	case unix.EINTR:
		return true, 0
	case unix.EAGAIN:
		*ready = false
		return false, 0
	}
	return false, e
}

// moved counts n bytes of f's source's stream passed on.
func (f *flow) moved(n int) {
	f.count.Add(uint64(n))
	*f.mine += uint64(n)
}

// pipeOut splices what waits in f's pipe to the destination, and gives
// the pipe back once it is empty. Before: inPipe > 0.
func (c *evConn) pipeOut(f *flow) (more bool, _ unix.Errno) {
	d := f.d
	if !*f.dstW {
		return false, 0
	}
	n, e := nbsys.Splice(d.pipe.R, f.dst, d.inPipe, spliceFlags)
	if e != 0 {
		return retry(e, f.dstW)
	}
	d.inPipe -= n
	f.moved(n)
	c.last = c.lp.now
	if d.inPipe == 0 {
		c.lp.pipes.Put(d.pipe, 0)
		d.hasPipe = false
	}
	return true, 0
}

// bufOut writes what waits in f's buffer to the destination, and gives
// the buffer back once it is empty. Before: end > off.
func (c *evConn) bufOut(f *flow) (more bool, _ unix.Errno) {
	d := f.d
	if !*f.dstW {
		return false, 0
	}
	var n int
	var e unix.Errno
	if d.eof {
		// The source's end is known: hold these bytes for the FIN
		// that shutdown or close sends next, so that both leave in
		// one segment.
		n, e = nbsys.SendMore(f.dst, d.buf[d.off:d.end])
	} else {
		n, e = nbsys.Write(f.dst, d.buf[d.off:d.end])
	}
	if e != 0 {
		return retry(e, f.dstW)
	}
	d.off += n
	c.last = c.lp.now
	if d.hdr > 0 {
		// The header is the relay's, not the client's: the byte
		// counts are the client's stream, as the goroutine engine's.
		h := min(n, int(d.hdr))
		d.hdr -= uint8(h)
		n -= h
	}
	f.moved(n)
	if d.off == d.end {
		d.off, d.end = 0, 0
		c.lp.putBuf(d.buf)
		d.buf = nil
	}
	return true, 0
}

// passEnd passes the source's end on, once: it shuts down writing on the
// destination, passing the half-close on while the other direction keeps
// flowing, unless that direction has finished too: then closing both
// sockets says the same. Before: the dir is empty and eof.
func (f *flow) passEnd() unix.Errno {
	d := f.d
	if d.shut {
		return 0
	}
	d.shut = true
	if !f.other.finished() {
		// ENOTCONN: the peer reset already; its own direction reports
		// it.
		if e := nbsys.ShutdownWrite(f.dst); e != 0 && e != unix.ENOTCONN {
			return e
		}
	}
	return 0
}

// pipeIn splices from the source into a pipe, taken from the loop's pool
// (or, with none to be had, the flow goes back to copying). A drained or
// ended source gives the empty pipe back. Before: the dir is empty.
func (c *evConn) pipeIn(f *flow) (more bool, _ unix.Errno) {
	d, l := f.d, c.lp
	if !d.hasPipe {
		p, e := l.pipes.Get()
		if e != 0 {
			d.spliced = false // out of descriptors: copy instead
			return true, 0
		}
		d.pipe, d.hasPipe = p, true
	}
	n, e := nbsys.Splice(f.src, d.pipe.W, f.most, spliceFlags)
	if e == unix.EAGAIN || e == 0 && n == 0 {
		l.pipes.Put(d.pipe, 0)
		d.hasPipe = false
	}
	switch {
	case e != 0:
		return retry(e, f.srcR)
	case n == 0:
		d.eof = true
	default:
		d.inPipe = n
	}
	return true, 0
}

// bufIn reads from the source into a buffer, taken from the loop's pool;
// a drained or ended source gives it back. Reads that keep filling the
// buffer prove the flow bulky (spliced). Before: the dir is empty.
func (c *evConn) bufIn(f *flow) (more bool, _ unix.Errno) {
	d, l := f.d, c.lp
	if d.buf == nil {
		d.buf = l.getBuf()
	}
	lim := min(len(d.buf), f.most)
	n, e := nbsys.Read(f.src, d.buf[:lim])
	if e == unix.EAGAIN || e == 0 && n == 0 {
		l.putBuf(d.buf)
		d.buf = nil
	}
	switch {
	case e != 0:
		return retry(e, f.srcR)
	case n == 0:
		d.eof = true
		return true, 0
	}
	d.off, d.end = 0, n
	if n == lim {
		if d.full++; d.full >= bulkReads {
			d.spliced = true
		}
		return true, 0
	}
	// A stream socket's read returns all it holds, up to the buffer: a
	// short read drained it, and new bytes will raise a new edge. This
	// saves the read that would return EAGAIN. Not once the peer's FIN
	// has been reported: it may wait behind the bytes, and no new edge
	// would come for it; it is read now instead.
	if f.srcHup {
		d.readToEnd(f.src, len(d.buf))
	} else {
		*f.srcR = false
	}
	d.full = 0
	return true, 0
}
