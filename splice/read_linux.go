package splice

import (
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/zeroio/zeroio/internal/nbsys"
)

// The buffered paths, for what no kernel path serves: read(2) on src's
// descriptor (waiting in the netpoller) and dst.Write, or src.Read and
// dst.Write as given.

// copyBuffer copies with src.Read and dst.Write as given.
func (j *job) copyBuffer() error {
	n, err := copyBuffer(j.dstW, j.srcR, j.remain, j.progress, &j.t)
	j.written += n
	return err
}

// readBuffered copies with read(2) on src's descriptor, waiting in the
// netpoller, and dst.Write. The buffer is taken when src has bytes and
// given back before waiting, so an idle copy holds none.
func (j *job) readBuffered() error {
	// Give the buffer back even if Progress panics and the caller
	// recovers, as splice gives back its pipe: otherwise BuffersInUse
	// would count it for good.
	defer func() {
		if j.buf != nil {
			putBuf(j.buf)
			j.buf = nil
		}
	}()
	for j.remain > 0 {
		j.n, j.errno = 0, nil
		if err := rawRead(j.src, j.readFn); err != nil {
			return opError(j.src, "read", err)
		}
		if j.errno != nil {
			return opError(j.src, "read", os.NewSyscallError("read", j.errno))
		}
		if j.n == 0 {
			return nil // EOF
		}
		nw, ew := j.write(j.buf[:j.n])
		j.advance(pathBuffer, nw)
		if ew != nil {
			return ew
		}
	}
	return nil
}

// read is the RawConn.Read callback of readBuffered.
func (j *job) read(fd uintptr) bool { return j.readUpTo(fd, j.remain) }

// readUpTo reads at most max bytes from fd into the pooled buffer, taken
// when fd has bytes and given back on EAGAIN, before the netpoller waits.
func (j *job) readUpTo(fd uintptr, max int64) bool {
	if j.buf == nil {
		j.buf = getBuf()
	}
	for {
		n, err := sysRead(fd, j.buf[:min(max, int64(len(j.buf)))], j.sys.rawSrc)
		switch err {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			putBuf(j.buf)
			j.buf = nil
			return false
		case nil:
			j.n = n
		}
		j.errno = err
		return true
	}
}

// write writes b to dst as given: with raw write(2) calls under its write
// lock when it is a socket of package net, with its Write method
// otherwise.
func (j *job) write(b []byte) (int, error) {
	if !j.sys.rawOut {
		return writeChunk(j.dstW, b, nil)
	}
	j.out, j.wrote, j.errno = b, 0, nil
	err := rawWrite(j.dstW, j.writeOutFn)
	n := j.wrote
	j.out = nil
	if err != nil {
		return n, opError(j.dst, "write", err)
	}
	if j.errno != nil {
		return n, opError(j.dst, "write", os.NewSyscallError("write", j.errno))
	}
	return n, nil
}

// writeOut is the RawConn.Write callback of write.
func (j *job) writeOut(fd uintptr) bool {
	for j.wrote < len(j.out) {
		n, e := nbsys.Write(int(fd), j.out[j.wrote:])
		switch {
		case e == 0 && n > 0:
			j.wrote += n
			continue
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			return false
		case e == 0:
			j.errno = io.ErrShortWrite // write(2) of a socket never returns 0
		default:
			j.errno = e
		}
		return true
	}
	return true
}

// sysRead is read(2) of fd; raw when it is a socket of package net.
func sysRead(fd uintptr, b []byte, raw bool) (int, error) {
	if raw {
		n, e := nbsys.Read(int(fd), b)
		if e != 0 {
			return 0, e
		}
		return n, nil
	}
	return unix.Read(int(fd), b)
}
