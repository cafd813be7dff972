package splice

import (
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/zeroio/zeroio/internal/nbsys"
)

// spliceFlags: SPLICE_F_NONBLOCK makes the pipe side non-blocking (the
// socket side is non-blocking already); SPLICE_F_MOVE is a hint
// (splice(2)).
const spliceFlags = unix.SPLICE_F_NONBLOCK | unix.SPLICE_F_MOVE

// splice moves bytes src -> pipe -> dst. Each round drains src into the
// empty pipe, then pumps the pipe empty into dst, so the pipe holds bytes
// only between the two halves. The pipe is taken when src has bytes and
// given back before waiting for src again, so an idle copy holds none.
//
// A copy without a limit between two stream sockets (a proxy's, carrying
// messages both ways) starts interactive, as HAProxy's splice-auto does:
// after each wait for src it reads up to interactiveRead bytes with
// read(2) and writes them, which for a short message costs less than two
// splices through a pipe (as many system calls, no pipe). A read that
// fills interactiveRead means a bulk burst: the rest of it is spliced, and
// a burst that moved interactiveRead bytes or more keeps the next one
// spliced from its first byte; a shorter burst makes the copy interactive
// again. The relay latency benchmark (a TCP ping-pong of small messages)
// measures the interactive half, the iperf3 one the bulk half.
func (j *job) splice() (handled bool, err error) {
	defer func() {
		if j.p != nil {
			if f, ok := j.src.(*os.File); ok && j.p.data > 0 {
				// dst failed with bytes still in the pipe: give them
				// back to a regular file by moving its offset to just
				// past the last byte dst took, as sendfile(2) leaves
				// it. (A pipe or socket cannot seek; its bytes are
				// gone, and the count returned says where they end.)
				f.Seek(-int64(j.p.data), io.SeekCurrent)
			}
			putPipe(j.p) // destroys it if bytes are left in it
			j.p = nil
		}
		if j.buf != nil {
			putBuf(j.buf)
			j.buf = nil
		}
	}()
	for j.remain > 0 {
		j.n, j.errno, j.viaBuf = 0, nil, false
		if err := rawRead(j.src, j.drainFn); err != nil {
			return true, opError(j.src, "read", err)
		}
		if j.viaBuf {
			if j.errno != nil {
				return true, opError(j.src, "read", os.NewSyscallError("read", j.errno))
			}
			if j.n == 0 {
				return true, nil // EOF
			}
			if j.n == interactiveRead { // a bulk burst: splice the rest
				j.interactive = false
			}
			nw, ew := j.write(j.buf[:j.n])
			j.burst += int64(nw)
			j.advance(pathBuffer, nw)
			if !j.interactive {
				putBuf(j.buf)
				j.buf = nil
			}
			if ew != nil {
				return true, ew
			}
			continue
		}
		if j.errno != nil {
			if j.p == nil || j.t.bytes[pathSplice] == 0 && notSupported(j.errno) {
				// No pipe to be had (EMFILE, ENFILE), or src cannot
				// splice. No byte is in flight: the buffered path
				// can take over, even midway.
				return false, nil
			}
			return true, opError(j.src, "read", os.NewSyscallError("splice", j.errno))
		}
		if j.n == 0 {
			return true, nil // EOF
		}
		j.p.data = j.n
		for j.p.data > 0 {
			j.errno, j.moved = nil, 0
			err := rawWrite(j.dst, j.pumpFn)
			if j.moved > 0 {
				j.advance(pathSplice, j.moved)
			}
			if err != nil {
				return true, opError(j.dst, "write", err)
			}
			if j.errno != nil {
				if j.dstRefused || j.t.bytes[pathSplice] == 0 && notSupported(j.errno) {
					// dst cannot take a splice, but src's bytes are
					// in the pipe already: hand them over with Write.
					return false, j.rescue()
				}
				return true, opError(j.dst, "write", os.NewSyscallError("splice", j.errno))
			}
		}
	}
	return true, nil
}

// drain is the RawConn.Read callback that moves bytes from src into the
// pipe, which is empty on entry. It takes a pipe if it has none and gives
// it back, still empty, on EAGAIN, before the netpoller waits.
func (j *job) drain(fd uintptr) bool {
	if j.interactive {
		return j.drainRead(fd)
	}
	if j.p == nil {
		p, err := getPipe(j.pipeSize)
		if err != nil {
			j.errno = err
			return true
		}
		j.p = p
	}
	for {
		n, err := sysSplice(fd, uintptr(j.p.w), int(min(j.remain, int64(j.p.size))), j.sys.rawSrc)
		switch err {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			// The pipe is empty, so EAGAIN means src has no bytes.
			putPipe(j.p)
			j.p = nil
			// A short burst means messages, not bulk: read the next.
			j.interactive = j.sys.proxy && j.burst < interactiveRead
			j.burst = 0
			return false
		case nil:
			j.n = int(n)
		}
		j.errno = err
		return true
	}
}

// interactiveRead is how much an interactive copy reads with read(2)
// after a wait: HAProxy's default buffer size (tune.bufsize).
const interactiveRead = 16 << 10

// drainRead is drain for an interactive copy: read(2) into the pooled
// buffer, taken when src has bytes and given back before waiting.
func (j *job) drainRead(fd uintptr) bool {
	if !j.readUpTo(fd, interactiveRead) {
		j.burst = 0
		return false
	}
	j.viaBuf = true
	return true
}

// pump is the RawConn.Write callback that moves the pipe's bytes to dst.
// With a Progress callback it returns after any progress so the copy can
// report it outside the descriptor lock, and waits for writability only
// when nothing moved.
func (j *job) pump(fd uintptr) bool {
	for j.p.data > 0 {
		n, err := sysSplice(uintptr(j.p.r), fd, j.p.data, j.sys.rawDst)
		switch {
		case err == nil && n > 0:
			j.p.data -= int(n)
			j.moved += int(n)
			j.burst += int64(n)
			continue
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			if j.dstProbe && !j.probeDst(fd) {
				j.errno = err
				return true
			}
			// Leave to report progress if anyone listens; otherwise
			// wait right here, saving a syscall and a lock round.
			return j.moved > 0 && j.progress != nil
		case err == nil:
			// 0 bytes from a pipe we know holds data: cannot happen,
			// but must not spin.
			err = unix.EIO
		}
		if j.dstProbe {
			j.probeDst(fd)
		}
		j.errno = err
		return true
	}
	return true
}

// rescue writes the bytes in the pipe to dst with Write after dst refused
// splice(2), then lets the copy continue on the buffered path. Without it
// those bytes would be lost: they have left src already.
func (j *job) rescue() error {
	j.buf = getBuf()
	for j.p.data > 0 {
		n, err := unix.Read(j.p.r, j.buf[:min(j.p.data, len(j.buf))])
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return opError(j.src, "read", os.NewSyscallError("read", err))
		}
		j.p.data -= n
		j.t.rescuedIn += int64(n)
		nw, ew := writeChunk(j.dstW, j.buf[:n], nil)
		j.advance(pathBuffer, nw)
		if ew != nil {
			return ew // the pipe is destroyed with what is left in it
		}
	}
	return nil
}

// sysSplice is splice(2) from rfd to wfd with spliceFlags, one of them a
// pipe of ours; raw when the other is a socket of package net.
func sysSplice(rfd, wfd uintptr, n int, raw bool) (int, error) {
	if raw {
		m, e := nbsys.Splice(int(rfd), int(wfd), n, spliceFlags)
		if e != 0 {
			return 0, e
		}
		return m, nil
	}
	m, err := unix.Splice(int(rfd), nil, int(wfd), nil, n, spliceFlags)
	return int(m), err
}
