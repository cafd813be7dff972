package splice

import (
	"io"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/zeroio/zeroio/internal/nbsys"
)

// kind is what an end of a copy is, as far as the kernel paths care.
type kind uint8

const (
	kNone    kind = iota // no usable descriptor: Read or Write only
	kSock                // a stream socket
	kPipe                // a pipe or FIFO in non-blocking mode
	kFile                // a regular file
	kOther               // a non-blocking character device or the like: try splice
	kUnknown             // an *os.File dst not classified yet: try splice (see dstKind)
)

const (
	// maxSendfile bounds one sendfile(2) or copy_file_range(2) call so
	// that Progress hears about a long file copy as it goes.
	maxSendfile = 16 << 20
	// spliceFlags: SPLICE_F_NONBLOCK makes the pipe side non-blocking
	// (the socket side is non-blocking already); SPLICE_F_MOVE is a hint.
	spliceFlags = unix.SPLICE_F_NONBLOCK | unix.SPLICE_F_MOVE
	// smallCopy is the largest Limit copied with read(2) and write(2)
	// rather than by a kernel path, except for the pairs that take one
	// from minZeroCopy up (see run).
	smallCopy = 16 << 10
	// minZeroCopy is the smallest Limit for which a regular file to a
	// stream socket takes sendfile(2), and a stream socket to another
	// (Unix to TCP aside) takes splice(2). Below it the fixed cost of a
	// kernel path (the pipe round trip of splice, the setup of sendfile)
	// outweighs the copy through user space that it saves; the splice
	// benchmarks (docs/BENCHMARKS.md) measure the crossover.
	minZeroCopy = 4 << 10
)

// job is the state of one copy that has a descriptor on its src side. Jobs
// are pooled, and their callbacks are method values bound once, so a copy
// allocates nothing (x/net's internal/socket binds its RawConn callbacks
// the same way).
type job struct {
	progress func(int64) // Copier.Progress
	src, dst any         // the ends, unwrapped
	srcR     io.Reader   // src as given, for the buffered path
	dstW     io.Writer   // dst as given, for the buffered path
	remain   int64
	written  int64
	pipeSize int
	t        tally

	p   *pipe  // held only while bytes move
	buf []byte // held only while bytes move

	// Interactive mode of an unlimited splice (see splice): read(2) the
	// first bytes after each wait into buf rather than splice them.
	interactive bool
	proxy       bool  // no limit and two stream sockets (see raw): may turn interactive
	viaBuf      bool  // the last drain read into buf
	burst       int64 // bytes moved since the last wait for src

	// Raw system calls (package nbsys) on sockets of package net, for a
	// proxy's copy and short copies: rawSrc for reads and splices from src, rawDst for
	// splices to dst, rawOut for the buffered paths' writes, which go to
	// dst as given. See netSocket.
	rawSrc, rawDst, rawOut bool
	out                    []byte // what writeOutFn writes
	wrote                  int    // how much of out it wrote

	// Results of the last callback.
	n      int
	errno  error // a raw errno from a syscall
	ctlErr error // an error from the inner RawConn (src closed)
	moved  int   // bytes that left the pipe during one pump callback
	dfd    uintptr
	dstRO  bool // EBADF: dst is not open for writing
	k      kind // result of statFn
	st     unix.Stat_t

	op path // the file path fileInner runs

	// src classified (srcKind): its kind, and its size if a regular file.
	srcKnown bool
	sk       kind
	srcSize  int64

	// dstProbe: dst is an *os.File the copy splices into unclassified
	// (dstKind). dstRefused: classified after it did not take bytes, it
	// is a descriptor the buffered path must serve.
	dstProbe, dstRefused bool

	drainFn, pumpFn, readFn, fileOuterFn, writeOutFn func(uintptr) bool
	fileInnerFn, statFn                              func(uintptr)
}

var jobs = sync.Pool{New: func() any {
	j := new(job)
	j.drainFn = j.drain
	j.pumpFn = j.pump
	j.readFn = j.read
	j.writeOutFn = j.writeOut
	j.fileOuterFn = j.fileOuter
	j.fileInnerFn = j.fileInner
	j.statFn = j.stat
	return j
}}

// hasFD reports whether v may carry a descriptor a copy can use directly.
// Only the standard types qualify unless v came out of an [Unwrapper]: a
// type that embeds *net.TCPConn gets its SyscallConn method for free but
// may well change the bytes its Read and Write move.
func hasFD(v any, unwrapped bool) bool {
	switch v.(type) {
	case *net.TCPConn, *net.UnixConn, *os.File:
		return true
	case syscall.Conn:
		return unwrapped
	}
	return false
}

func (c *Copier) copy(dst io.Writer, src io.Reader, remain int64) (written int64, err error) {
	s, sOK := unwrap(src)
	if !hasFD(s, sOK) {
		var t tally
		written, err = copyBuffer(dst, src, remain, c.Progress, &t)
		t.flush()
		return written, err
	}
	d, dOK := unwrap(dst)
	j := jobs.Get().(*job)
	j.progress, j.src, j.dst, j.srcR, j.dstW, j.remain = c.Progress, s, d, src, dst, remain
	j.pipeSize = c.PipeSize
	if remain == math.MaxInt64 && isStream(s) && isStream(d) {
		j.proxy = true
		j.rawSrc, j.rawDst, j.rawOut = true, true, netSocket(dst)
	} else if remain <= smallCopy {
		j.rawSrc, j.rawDst, j.rawOut = netSocket(s), netSocket(d), netSocket(dst)
	}
	if j.pipeSize <= 0 {
		j.pipeSize = DefaultPipeSize
	}
	err = j.run(hasFD(d, dOK))
	if j.buf != nil {
		putBuf(j.buf)
	}
	written = j.written
	j.t.flush()
	*j = job{
		drainFn: j.drainFn, pumpFn: j.pumpFn, readFn: j.readFn, writeOutFn: j.writeOutFn,
		fileOuterFn: j.fileOuterFn, fileInnerFn: j.fileInnerFn, statFn: j.statFn,
	}
	jobs.Put(j)
	return written, err
}

// run picks the kernel path for the pair and falls back, path by path, as
// long as no byte has moved.
func (j *job) run(dstFD bool) error {
	triedSendfile := false
	if dstFD && j.remain >= minZeroCopy && fileToStream(j.src, j.dst) {
		if j.fileToTCPSplices() {
			j.t.last = pathSplice
			if handled, err := j.splice(); handled || err != nil {
				return err
			}
			j.t.fellBack = true // a file system without splice_read
		}
		// Otherwise sendfile(2) at once, without the fstat(2) that
		// would tell a regular file from a pipe, as the standard
		// library does (net/sendfile.go): the kernel refuses an in_fd
		// it cannot seek (a pipe, a socket, a tty) with EINVAL before
		// reading a byte (sendfile(2): in_fd must support mmap-like
		// operations; TestSendfileProbe checks that the bytes stay in
		// a pipe), and then the copy classifies src
		// as below. That refusal is the probe doing its job, not a
		// fallback.
		triedSendfile = true
		j.t.last = pathSendfile
		if handled, err := j.fileCopy(pathSendfile); handled || err != nil {
			return err
		}
		j.t.last = pathBuffer
	}
	if j.remain <= smallCopy && (j.remain < minZeroCopy || !isStream(j.src) || !isStream(j.dst)) {
		// Other short copies go through a buffer, without even an
		// fstat(2) to classify the ends: for a few KiB, read(2) and
		// write(2) cost less than that classification, and below
		// minZeroCopy less than the pipe round trip of splice too
		// (the splice benchmarks measure the crossover; for tcp-to-file
		// splice does not pay off up to smallCopy). Only a
		// datagram Unix conn, known without a syscall, needs its own
		// Read.
		if uc, ok := j.src.(*net.UnixConn); ok && j.kindOf(uc) == kNone {
			return j.copyBuffer()
		}
		return j.readBuffered()
	}
	sk := j.srcKind()
	dk := kNone
	if dstFD && sk != kNone {
		dk = j.dstKind(sk)
	}
	if sk == kNone {
		// A descriptor the kernel paths cannot use (a datagram socket,
		// a blocking pipe): plain Read and Write.
		return j.copyBuffer()
	}
	if dk != kNone {
		if sk == kFile && dk == kFile {
			j.t.last = pathCopyFileRange
			if handled, err := j.fileCopy(pathCopyFileRange); handled || err != nil {
				return err
			}
			j.t.fellBack = true
		}
		if sk == kFile {
			if !triedSendfile {
				j.t.last = pathSendfile
				if handled, err := j.fileCopy(pathSendfile); handled || err != nil {
					return err
				}
			}
			j.t.fellBack = true // a regular file that refused sendfile
		}
		if unixToTCP(j.src, j.dst) && j.remain > smallCopy {
			j.t.last = pathBuffer
			return j.readBuffered()
		}
		j.t.last = pathSplice
		j.interactive = j.proxy
		if handled, err := j.splice(); handled || err != nil {
			return err
		}
		j.t.fellBack = true
	}
	j.t.last = pathBuffer
	return j.readBuffered()
}

// fileSpliceMin is the shortest copy from a regular file into a TCP socket
// that splices through a pipe rather than taking sendfile(2). sendfile
// moves a file through the kernel's own pipe of 16 pages, pushing each
// 64 KiB into the socket in turn; one splice into a pooled 1 MiB pipe and
// one out of it move the same bytes with fewer rounds through the TCP
// send path. Below fileSpliceMin the extra splice call and the pipe cost
// more than those rounds save, so sendfile stays. Into a Unix socket
// sendfile stays at every size: there is no TCP segmentation to batch, and
// the second splice is pure cost. The pair=file-to-tcp and file-to-unix
// cases of the splice benchmarks (docs/BENCHMARKS.md) measure both.
const fileSpliceMin = 256 << 10

// fileToTCPSplices reports whether a copy from an *os.File into a TCP
// socket should splice: at least fileSpliceMin to move, from a regular
// file at least that long. It costs an fstat(2) of src, which a copy that
// long does not notice.
func (j *job) fileToTCPSplices() bool {
	if j.remain < fileSpliceMin {
		return false
	}
	if _, ok := j.dst.(*net.TCPConn); !ok {
		return false
	}
	return j.srcKind() == kFile && j.srcSize >= fileSpliceMin
}

// srcKind classifies src once per copy: a pipe that fileToTCPSplices
// classified and sendfile then refused is not fstat'ed a second time.
func (j *job) srcKind() kind {
	if !j.srcKnown {
		j.sk, j.srcKnown = j.kindOf(j.src), true
		j.srcSize = j.st.Size
	}
	return j.sk
}

// dstKind classifies dst for a copy from a src of kind sk. An *os.File dst
// after a src that is not a regular file (whose pair may take sendfile or
// copy_file_range) is not classified up front: the copy splices into it
// as the standard library does (os.File.ReadFrom), and the fstat(2) runs
// only if dst does not take the bytes (see probeDst). A regular file, the
// usual dst, never needs it. The fstat(2) is a visible share of a
// tcp-to-file copy of tens of KiB, which is why it is deferred.
func (j *job) dstKind(sk kind) kind {
	if _, ok := j.dst.(*os.File); ok && sk != kFile {
		j.dstProbe = true
		return kUnknown
	}
	return j.kindOf(j.dst)
}

// probeDst classifies an unclassified dst, from inside pump (fd is dst's),
// after dst returned an error or EAGAIN instead of taking bytes. It
// reports whether the splice may go on: not into what kindOf would have
// sent to the buffered path, a blocking pipe or device (which the
// netpoller cannot wait for: its RawConn fails the wait) or a datagram
// socket. The bytes in the pipe are then written with Write (rescue).
func (j *job) probeDst(fd uintptr) bool {
	j.dstProbe = false
	j.stat(fd)
	j.dstRefused = j.k == kNone
	return !j.dstRefused
}

// isStream reports whether v is a stream socket of the standard types,
// known without a syscall.
func isStream(v any) bool {
	switch c := v.(type) {
	case *net.TCPConn:
		return true
	case *net.UnixConn:
		return unixNet(c) == "unix"
	}
	return false
}

// unixNet returns c's network ("unix", "unixgram", "unixpacket"), or ""
// when its local address does not say.
func unixNet(c *net.UnixConn) string {
	if a, ok := c.LocalAddr().(*net.UnixAddr); ok && a != nil {
		return a.Net
	}
	return ""
}

// fileToStream reports whether the copy is from an *os.File (a regular
// file, most likely) to a stream socket, the pair sendfile(2) serves.
func fileToStream(src, dst any) bool {
	_, f := src.(*os.File)
	return f && isStream(dst)
}

// unixToTCP reports whether the copy is from a Unix socket to a TCP one,
// the one pair where splice(2) is slower than read(2) and write(2) for
// long copies on current kernels, although the standard library splices
// it since go.dev/cl/113997. BenchmarkSplice pair=unix-to-tcp keeps a
// buffered zeroio variant beside the spliced one to show it, and
// docs/BENCHMARKS.md explains why. Copies limited to minZeroCopy up to
// smallCopy splice, as for the other stream pairs, where the pipe round
// trip still costs less than the copy through user space.
func unixToTCP(src, dst any) bool {
	_, u := src.(*net.UnixConn)
	_, t := dst.(*net.TCPConn)
	return u && t
}

// copyBuffer copies with src.Read and dst.Write as given.
func (j *job) copyBuffer() error {
	n, err := copyBuffer(j.dstW, j.srcR, j.remain, j.progress, &j.t)
	j.written += n
	return err
}

// kindOf classifies an end. Sockets of the standard types are known by
// type; files and unknown types cost an fstat(2).
func (j *job) kindOf(v any) kind {
	switch c := v.(type) {
	case *net.TCPConn:
		return kSock
	case *net.UnixConn:
		switch unixNet(c) {
		case "unix":
			return kSock
		case "":
		default:
			return kNone // unixgram, unixpacket: splice would merge messages
		}
	}
	j.k = kNone
	if rawControl(v, j.statFn) != nil {
		return kNone
	}
	return j.k
}

func (j *job) stat(fd uintptr) {
	j.k = kNone
	if unix.Fstat(int(fd), &j.st) != nil {
		return
	}
	switch j.st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		j.k = kFile
	case unix.S_IFSOCK:
		if t, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TYPE); err == nil && t == unix.SOCK_STREAM {
			j.k = kSock
		}
	case unix.S_IFIFO, unix.S_IFCHR:
		// A blocking descriptor is not in the netpoller: splice with
		// SPLICE_F_NONBLOCK would return EAGAIN with nothing to wait on,
		// and without it would block a thread. Read and Write it.
		if fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0); err == nil && fl&unix.O_NONBLOCK != 0 {
			if j.st.Mode&unix.S_IFMT == unix.S_IFIFO {
				j.k = kPipe
			} else {
				j.k = kOther
			}
		}
	}
}

// notSupported reports whether errno from a zero-copy call that moved
// nothing means "this pair cannot do it": the bytes are still in src and
// another path can take over (internal/poll makes the same call for
// EINVAL; ENOSYS, EOPNOTSUPP and EXDEV as its sendfile and
// copy_file_range code does).
func notSupported(errno error) bool {
	switch errno {
	case unix.EINVAL, unix.ENOSYS, unix.EOPNOTSUPP, unix.EXDEV:
		return true
	}
	return false
}

// advance adds n bytes that reached dst by path p.
func (j *job) advance(p path, n int) {
	if n == 0 {
		return
	}
	j.written += int64(n)
	j.remain -= int64(n)
	j.t.moved(p, n)
	if j.progress != nil {
		j.progress(int64(n))
	}
}

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
		n, err := sysSplice(fd, uintptr(j.p.w), int(min(j.remain, int64(j.p.size))), j.rawSrc)
		switch err {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			// The pipe is empty, so EAGAIN means src has no bytes.
			putPipe(j.p)
			j.p = nil
			// A short burst means messages, not bulk: read the next.
			j.interactive = j.proxy && j.burst < interactiveRead
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
		n, err := sysSplice(uintptr(j.p.r), fd, j.p.data, j.rawDst)
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

// readBuffered copies with read(2) on src's descriptor, waiting in the
// netpoller, and dst.Write. The buffer is taken when src has bytes and
// given back before waiting, so an idle copy holds none.
func (j *job) readBuffered() error {
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
		n, err := sysRead(fd, j.buf[:min(max, int64(len(j.buf)))], j.rawSrc)
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
	if !j.rawOut {
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
		n, e := nbsys.Write(fd, j.out[j.wrote:])
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

// netSocket reports whether v is a socket of package net, which is
// non-blocking by construction, so that its system calls cannot block and
// may be raw (package nbsys): without the runtime's entersyscall and
// exitsyscall around them, which wake the sysmon thread each time the
// copy comes back from waiting with every P idle.
//
// A proxy's copy (no limit, both ends stream sockets of package net)
// makes them raw: each of its many short system calls would otherwise
// wake sysmon, which then costs the relay CPU per byte and latency per
// message. Short copies (up to smallCopy) make them raw too, for the same
// per-call saving. Longer bounded copies keep syscall.Syscall: on a
// machine with few CPUs, sysmon's polling after each wake keeps an
// otherwise idle CPU from halting, which spares the processes at the
// other ends the cost of waking it; raw calls lose that and long copies
// between Unix sockets get slower. Package nbsys explains the runtime
// side (entersyscall in runtime/proc.go wakes a sleeping sysmon:
// entersyscallWakeSysmon).
func netSocket(v any) bool {
	switch v.(type) {
	case *net.TCPConn, *net.UnixConn:
		return true
	}
	return false
}

// sysSplice is splice(2) from rfd to wfd with spliceFlags, one of them a
// pipe of ours; raw when the other is a socket of package net.
func sysSplice(rfd, wfd uintptr, n int, raw bool) (int, error) {
	if raw {
		m, e := nbsys.Splice(rfd, wfd, n, spliceFlags)
		if e != 0 {
			return 0, e
		}
		return m, nil
	}
	m, err := unix.Splice(int(rfd), nil, int(wfd), nil, n, spliceFlags)
	return int(m), err
}

// sysRead is read(2) of fd; raw when it is a socket of package net.
func sysRead(fd uintptr, b []byte, raw bool) (int, error) {
	if raw {
		n, e := nbsys.Read(fd, b)
		if e != 0 {
			return 0, e
		}
		return n, nil
	}
	return unix.Read(int(fd), b)
}

// fileCopy moves bytes from a regular file with sendfile(2) (to any
// descriptor) or copy_file_range(2) (to a regular file, where it can
// share extents or copy inside the kernel). Both read at and advance
// src's file offset, and write at dst's, as Read and Write would.
func (j *job) fileCopy(p path) (handled bool, err error) {
	j.op = p
	name := "sendfile"
	if p == pathCopyFileRange {
		name = "copy_file_range"
	}
	for j.remain > 0 {
		j.n, j.errno, j.ctlErr = 0, nil, nil
		err := rawWrite(j.dst, j.fileOuterFn)
		if j.ctlErr != nil {
			return true, opError(j.src, "read", j.ctlErr)
		}
		if err != nil {
			return true, opError(j.dst, "write", err)
		}
		if j.errno != nil {
			if j.written == 0 && (notSupported(j.errno) ||
				// copy_file_range: EIO on CIFS (go.dev/issue/42334),
				// EPERM in some containers (go.dev/issue/40893).
				p == pathCopyFileRange && (j.errno == unix.EIO || j.errno == unix.EPERM) ||
				// EBADF: an end not open for what the call needs
				// (src write-only; dst O_APPEND, which
				// copy_file_range refuses and write(2) takes). The
				// next paths find out which end it was, so the
				// error names that end, as its own Read or Write
				// would.
				j.errno == unix.EBADF && !j.dstRO) {
				return false, nil
			}
			return true, opError(j.dst, "write", os.NewSyscallError(name, j.errno))
		}
		if j.n == 0 {
			// EOF. Before Linux 5.19 copy_file_range could also report
			// 0 bytes for files it cannot copy (procfs, sysfs); then
			// let sendfile decide, as internal/poll does.
			return p == pathSendfile || j.written != 0, nil
		}
		j.advance(p, j.n)
	}
	return true, nil
}

// fileOuter runs under dst's write lock and reaches src inside it, so
// that while dst is full the copy waits holding nothing of src (closing
// src does not have to wait for dst to drain).
func (j *job) fileOuter(fd uintptr) bool {
	j.dfd = fd
	if err := rawControl(j.src, j.fileInnerFn); err != nil {
		j.ctlErr = err
		return true
	}
	if j.errno == unix.EAGAIN {
		j.errno = nil
		return false
	}
	return true
}

func (j *job) fileInner(fd uintptr) {
	for {
		var n int
		var err error
		if j.op == pathCopyFileRange {
			n, err = unix.CopyFileRange(int(fd), nil, int(j.dfd), nil, int(min(j.remain, maxSendfile)), 0)
		} else {
			n, err = unix.Sendfile(int(j.dfd), int(fd), nil, int(min(j.remain, maxSendfile)))
		}
		if err == unix.EINTR {
			continue
		}
		if err == nil {
			j.n = n
		}
		if err == unix.EBADF {
			fl, ferr := unix.FcntlInt(j.dfd, unix.F_GETFL, 0)
			j.dstRO = ferr == nil && fl&unix.O_ACCMODE == unix.O_RDONLY
		}
		j.errno = err
		return
	}
}

// opError wraps an error of one end the way that end's own Read or Write
// would: *net.OpError for conns, *os.PathError for files. Errors from a
// net RawConn arrive wrapped as "raw-read"/"raw-write"; the op is named
// again here.
func opError(v any, op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		err = oe.Err
	}
	switch c := v.(type) {
	case net.Conn:
		la, ra := c.LocalAddr(), c.RemoteAddr()
		var nw string
		if la != nil {
			nw = la.Network()
		}
		return &net.OpError{Op: op, Net: nw, Source: la, Addr: ra, Err: err}
	case *os.File:
		if err == errFileClosing() {
			err = os.ErrClosed // as (*os.File).Read reports it
		}
		var name string
		if c != nil {
			name = c.Name()
		}
		return &os.PathError{Op: op, Path: name, Err: err}
	}
	return &net.OpError{Op: op, Err: err}
}

// errFileClosing returns the error a closed *os.File's RawConn reports
// (internal/poll's ErrFileClosing, which os maps to os.ErrClosed in its own
// methods but not in RawConn's), learned from a closed pipe so it can be
// compared by identity. A failure to learn it (no descriptors left) is not
// remembered: the next call tries again.
func errFileClosing() error {
	if e := fileClosing.Load(); e != nil {
		return *e
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil
	}
	w.Close()
	r.Close()
	rc, err := r.SyscallConn()
	if err != nil {
		return nil
	}
	e := rc.Control(func(uintptr) {})
	if e != nil {
		fileClosing.Store(&e)
	}
	return e
}

var fileClosing atomic.Pointer[error]
