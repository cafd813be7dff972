package relay

import (
	"errors"
	"io"
	"math"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zeroio/zeroio/splice"
)

// The goroutine engine's relay of a connected pair: a goroutine per
// direction copying with package splice, and the idle timeout.

// relay copies both directions until both end, then closes both sides.
// It returns the error that ended the relay (stream.end): nil when both
// sides closed.
func (p *pair) relay() error {
	rt := p.rt
	now := mono()
	p.last.Store(now)
	p.startPacing(now)
	if p.pace.on != [2]bool{} {
		p.stop = make(chan struct{})
	}
	if left := p.timerLeft(now); left != math.MaxInt64 {
		p.mu.Lock()
		p.timer = time.AfterFunc(time.Duration(left), p.checkTimer)
		p.mu.Unlock()
	}
	done := make(chan struct{})
	go func() { p.half(p.target, p.client, dirUp, &rt.st.bytesUp, &p.upA, endClientClosed); close(done) }()
	p.half(p.client, p.target, dirDown, &rt.st.bytesDown, &p.downA, endTargetClosed)
	<-done
	p.upN += p.upA.Load()
	p.downN += p.downA.Load()
	p.mu.Lock()
	if p.timer != nil {
		p.timer.Stop()
	}
	why := p.why
	p.aborted = true
	p.mu.Unlock()
	p.client.Close()
	p.target.Close()
	return why
}

// half copies src to dst. At EOF it shuts down writing on dst, passing
// the half-close on while the other direction keeps flowing; on an error
// it aborts both directions, and the first error is the pair's cause.
// A failed write to dst is left to the other direction to end (below).
func (p *pair) half(dst, src net.Conn, d int, count, mine *atomic.Uint64, eof endReason) {
	progress := func(n int64) {
		p.last.Store(mono())
		count.Add(uint64(n))
		mine.Add(uint64(n))
	}
	var err error
	w, r := io.Writer(dst), io.Reader(src)
	if p.rt.srv.noSplice { // hide the sockets from package splice
		w, r = struct{ io.Writer }{dst}, struct{ io.Reader }{src}
	}
	if p.pace.on[d] {
		err = p.pacedCopy(w, r, d, progress)
	} else {
		_, err = copyStream(w, r, progress)
	}
	if oe, ok := err.(*net.OpError); ok && oe.Op == "write" && p.noteWriteFailed(err) {
		// dst's peer closed and reset at these bytes (a write fails
		// only on a connection that is over). What it sent before, a
		// server's goodbye (an error reply, SMTP's 421), is still
		// readable on dst's socket: the other direction passes it on
		// and then meets dst's EOF or reset, which ends the pair.
		// Aborting here instead would race it and could close src
		// before the goodbye reaches it.
		return
	}
	if err == nil {
		p.mu.Lock()
		if p.endFirst == 0 {
			p.endFirst = eof
		}
		p.mu.Unlock()
		cw, ok := dst.(interface{ CloseWrite() error })
		if !ok {
			return
		}
		// ENOTCONN: the peer already reset; the other half reports it.
		if err = cw.CloseWrite(); err == nil || errors.Is(err, syscall.ENOTCONN) {
			return
		}
	}
	p.abort(err)
}

// noteWriteFailed records err, a failed write, as the pair's cause
// unless the pair is already over, which it reports.
func (p *pair) noteWriteFailed(err error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.aborted {
		return false
	}
	if p.why == nil {
		p.why = err
	}
	return true
}

// abort closes both sides once, unblocking both directions; the first
// call's reason is kept.
func (p *pair) abort(why error) {
	p.mu.Lock()
	if p.aborted {
		p.mu.Unlock()
		return
	}
	p.aborted = true
	if p.why == nil { // else a failed write came first
		p.why = why
	}
	if p.stop != nil {
		close(p.stop)
	}
	t, cancel := p.target, p.cancel
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	p.client.Close()
	if t != nil {
		t.Close()
	}
}

// isAborted reports whether abort has run.
func (p *pair) isAborted() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.aborted
}

// timerLeft is how long from now until the pair's timer is due: its
// MaxDuration, or its idle timeout, counted from the last chunk moved
// (or from now while a direction waits for its rate); 0 or less once
// one is over, and math.MaxInt64 with neither.
func (p *pair) timerLeft(now int64) int64 {
	left := int64(math.MaxInt64)
	if idle := p.cfg.IdleTimeout; idle > 0 {
		last := p.last.Load()
		if p.waiting.Load() > 0 {
			last = now
		}
		left = idleLeft(idle, last, now)
	}
	if end := p.pace.end; end != 0 {
		left = min(left, end-now)
	}
	return left
}

// checkTimer runs on the pair's timer: it aborts the pair at its
// MaxDuration or when nothing moved for IdleTimeout, or re-arms for the
// time left.
func (p *pair) checkTimer() {
	now := mono()
	if end := p.pace.end; end != 0 && now >= end {
		p.abort(errMaxDuration)
		return
	}
	left := p.timerLeft(now)
	if left <= 0 {
		p.abort(errIdle)
		return
	}
	p.mu.Lock()
	if !p.aborted {
		p.timer.Reset(time.Duration(left))
	}
	p.mu.Unlock()
}

// setKeepAlive sets r's keepAlive on an accepted connection, as the dial
// does on the target side; without, the socket is left as accepted (the
// listener's setting), and no system call is made.
func setKeepAlive(c net.Conn, r *Route) {
	if tc, ok := c.(*net.TCPConn); ok && r.KeepAlive > 0 {
		tc.SetKeepAliveConfig(keepAlive(r))
	}
}

func setNoDelay(c net.Conn, on bool) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(on)
	}
}

// copyStream moves src to dst until EOF (nil error) or an error, calling
// progress after each chunk reaches dst: the goroutine engine's copy, one
// per direction (the event engine moves bytes in its loops, see pump).
// It splices through a pooled pipe on Linux for TCP and Unix sockets, and
// copies through a pooled buffer elsewhere. A copy waiting on an idle src
// holds neither pipe nor buffer (package splice's contract), so idle
// relays cost their goroutines and sockets only.
//
// The pipes are splice's default 1 MiB, as the standard library's: on
// loopback iperf3, smaller pipes cost more CPU per byte (more splice
// calls) for no gain in throughput, and larger ones (as root, past
// pipe-max-size) more CPU per byte and less throughput. Pipe memory is
// only in use while bytes are in flight.
func copyStream(dst io.Writer, src io.Reader, progress func(int64)) (int64, error) {
	c := splice.Copier{Progress: progress}
	return c.Copy(dst, src)
}
