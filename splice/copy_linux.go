package splice

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// job is the state of one copy that has a descriptor on its src side. Jobs
// are pooled, and their callbacks are method values bound once, so a copy
// allocates nothing (x/net's internal/socket binds its RawConn callbacks
// the same way). run carries out what choose (choose.go) decides; the
// paths that move bytes are in splice_linux.go, sendfile_linux.go and
// read_linux.go.
type job struct {
	progress func(int64) // Copier.Progress
	src, dst any         // the ends, unwrapped
	srcR     io.Reader   // src as given, for the buffered path
	dstW     io.Writer   // dst as given, for the buffered path
	remain   int64
	written  int64
	pipeSize int
	sys      syscalls // which calls are raw; whether it is a proxy's copy
	c        choice   // what the choice of path knows so far
	t        tally

	p   *pipe  // held only while bytes move
	buf []byte // held only while bytes move

	// Interactive mode of an unlimited splice (see splice): read(2) the
	// first bytes after each wait into buf rather than splice them.
	interactive bool
	viaBuf      bool  // the last drain read into buf
	burst       int64 // bytes moved since the last wait for src

	out   []byte // what writeOutFn writes
	wrote int    // how much of out it wrote

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

	// dstProbe: dst is an *os.File the copy splices into unclassified
	// (see choose). dstRefused: classified after it did not take bytes,
	// it is a descriptor the buffered path must serve.
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

func (c *Copier) copy(dst io.Writer, src io.Reader, remain int64) (written int64, err error) {
	s, sOK := unwrap(src)
	st := typeOf(s, sOK)
	if st == tNone {
		var t tally
		written, err = copyBuffer(dst, src, remain, c.Progress, &t)
		t.flush()
		return written, err
	}
	d, dOK := unwrap(dst)
	dt := typeOf(d, dOK)
	j := jobs.Get().(*job)
	j.progress, j.src, j.dst, j.srcR, j.dstW, j.remain = c.Progress, s, d, src, dst, remain
	j.pipeSize = c.PipeSize
	if j.pipeSize <= 0 {
		j.pipeSize = DefaultPipeSize
	}
	j.sys = chooseSyscalls(remain, c.Relay, st, dt, typeOf(dst, false))
	j.c = choice{src: newEnd(st), dst: newEnd(dt)}
	err = j.run()
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

// run asks choose what to do next and does it, until a path finishes the
// copy: a kernel path that refuses hands over to the next as long as no
// byte is lost (see job.rescue).
func (j *job) run() error {
	for {
		j.c.limit = j.remain
		a := choose(j.c)
		switch a.step {
		case stepClassifySrc:
			j.c.src.kind, j.c.src.known = j.kindOf(j.src), true
			j.c.src.size = j.st.Size
			continue
		case stepClassifyDst:
			j.c.dst.kind, j.c.dst.known = j.kindOf(j.dst), true
			continue
		}
		if a.fellBack {
			j.t.fellBack = true
		}
		var handled bool
		var err error
		switch a.step {
		case stepCopy:
			j.t.last = pathBuffer
			return j.copyBuffer()
		case stepRead:
			j.t.last = pathBuffer
			return j.readBuffered()
		case stepSplice:
			j.t.last = pathSplice
			j.interactive, j.dstProbe = j.sys.proxy, a.probeDst
			handled, err = j.splice()
		case stepSendfile:
			j.t.last = pathSendfile
			handled, err = j.fileCopy(pathSendfile)
		case stepCopyFileRange:
			j.t.last = pathCopyFileRange
			handled, err = j.fileCopy(pathCopyFileRange)
		}
		if handled || err != nil {
			return err
		}
		j.c.tried.add(a.step)
		if !a.probe {
			j.t.fellBack = true
		}
		j.t.last = pathBuffer
	}
}

// kindOf classifies an end. Sockets of the standard types are known by
// type; files and unknown types cost an fstat(2).
func (j *job) kindOf(v any) kind {
	if e := newEnd(typeOf(v, true)); e.known {
		return e.kind
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
	mode := j.st.Mode & unix.S_IFMT
	if mode == unix.S_IFREG {
		j.k = kFile
		return
	}
	// A blocking descriptor is not in the netpoller: splice with
	// SPLICE_F_NONBLOCK would return EAGAIN with nothing to wait on (a
	// Unix socket, a pipe), and without it would block a thread. Read
	// and Write it. That holds for sockets too: an *os.File may wrap a
	// blocking one (stdin under inetd or socat's EXEC).
	if fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK == 0 {
		return
	}
	switch mode {
	case unix.S_IFSOCK:
		if t, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TYPE); err == nil && t == unix.SOCK_STREAM {
			j.k = kSock
		}
	case unix.S_IFIFO:
		j.k = kPipe
	case unix.S_IFCHR:
		j.k = kOther
	}
}

// probeDst classifies an unclassified dst, from inside pump (fd is dst's),
// after dst returned an error or EAGAIN instead of taking bytes. It
// reports whether the splice may go on: not into what kindOf would have
// sent to the buffered path, a blocking pipe, socket or device (which the
// netpoller cannot wait for: its RawConn fails the wait) or a datagram
// socket. The bytes in the pipe are then written with Write (rescue).
func (j *job) probeDst(fd uintptr) bool {
	j.dstProbe = false
	j.stat(fd)
	j.dstRefused = j.k == kNone
	return !j.dstRefused
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
