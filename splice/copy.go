package splice

import (
	"io"
	"math"
	"net"
	"os"
)

// Copy copies from src to dst until EOF on src or an error, and returns the
// number of bytes that reached dst and the first error encountered. It is a
// drop-in for [io.Copy]: a successful Copy returns err == nil, not io.EOF.
//
// On Linux, when both ends carry a file descriptor (see the package
// documentation), the bytes move inside the kernel; otherwise they move
// through a pooled buffer.
func Copy(dst io.Writer, src io.Reader) (written int64, err error) {
	var c Copier
	return c.Copy(dst, src)
}

// CopyN copies n bytes (or until an error) from src to dst, and returns the
// number of bytes that reached dst and the earliest error. It is a drop-in
// for [io.CopyN]: written == n if and only if err == nil, and if src ends
// early the error is [io.EOF].
func CopyN(dst io.Writer, src io.Reader, n int64) (written int64, err error) {
	if n <= 0 {
		return 0, nil
	}
	c := Copier{Limit: n}
	written, err = c.Copy(dst, src)
	if written == n {
		return n, nil
	}
	if err == nil {
		err = io.EOF
	}
	return written, err
}

// A Copier copies a stream with options. The zero Copier behaves as [Copy].
// A Copier holds no state between calls and may be used by many goroutines
// at once.
type Copier struct {
	// Limit is the most bytes a Copy moves; 0 means until EOF, and a
	// negative Limit moves nothing. Reaching Limit is not an error, and
	// neither is reaching EOF before it (use [CopyN] for that).
	Limit int64

	// Progress, if set, is called from the copying goroutine each time a
	// chunk of n bytes has reached dst, so a caller can count bytes live
	// or extend a deadline (an idle timeout) while the kernel moves them.
	// It is never called while a file descriptor lock is held, so it may
	// call SetDeadline or Close on either end.
	Progress func(n int64)

	// PipeSize is the pipe capacity in bytes requested with F_SETPIPE_SZ
	// for the splice path (0: [DefaultPipeSize]). The kernel rounds it up
	// to a power-of-two number of pages and may grant less (see
	// [Stats].SmallPipes); the copy adapts to what it gets. Ignored
	// where splice(2) is not used.
	PipeSize int

	// Relay marks the copy as one direction of a relay between two
	// stream sockets, paced by Limit (a rate limit's allowance): its
	// system calls are made as those of an unlimited copy between two
	// stream sockets are (raw, and its first reads sized for
	// interactive traffic), whatever Limit. Without it a long bounded
	// copy is taken for a bulk one. Ignored unless both ends are stream
	// sockets.
	Relay bool
}

// DefaultPipeSize is the pipe capacity requested when [Copier].PipeSize is
// 0: 1 MiB, the default /proc/sys/fs/pipe-max-size, as the standard
// library's internal/poll uses.
const DefaultPipeSize = 1 << 20

// bufSize is the size of the pooled buffer of the buffered path.
const bufSize = 64 << 10

// Copy copies from src to dst with c's options; see [Copy].
func (c *Copier) Copy(dst io.Writer, src io.Reader) (written int64, err error) {
	remain := int64(math.MaxInt64)
	if c.Limit != 0 {
		remain = c.Limit
	}
	if remain <= 0 {
		return 0, nil
	}
	// A nil *os.File end fails at once, as its own methods do.
	if nilFile(dst) || nilFile(src) {
		return 0, os.ErrInvalid
	}
	// Unwrap io.LimitedReader as io.Copy's fast paths do, keeping its N
	// current, so CopyN-style callers keep splicing.
	if lr, ok := src.(*io.LimitedReader); ok {
		if lr.N <= 0 {
			return 0, nil
		}
		remain = min(remain, lr.N)
		written, err = c.copy(dst, lr.R, remain)
		lr.N -= written
		return written, err
	}
	return c.copy(dst, src, remain)
}

func nilFile(v any) bool {
	f, ok := v.(*os.File)
	return ok && f == nil
}

// nilConn reports whether w, an answer of UnwrapConn, is nil or a nil
// pointer of a type the copy would use directly. Returning a field that
// is a nil *net.TCPConn from a method whose result is any gives a non-nil
// interface (go.dev/doc/faq#nil_error), and that conn's SyscallConn
// panics; it is taken as the refusal it was meant to be.
func nilConn(w any) bool {
	switch c := w.(type) {
	case nil:
		return true
	case *net.TCPConn:
		return c == nil
	case *net.UnixConn:
		return c == nil
	case *os.File:
		return c == nil
	}
	return false
}

// maxUnwrap bounds how many [Unwrapper] layers are peeled off one end, so
// a wrapper that returns itself cannot loop forever.
const maxUnwrap = 8

// Unwrapper is implemented by wrapper types (a conn that counts bytes, a
// conn with a PROXY header already consumed, a logging file) whose bytes
// pass through unchanged, to hand the copy the value underneath so it can
// still splice.
//
// UnwrapConn returns a *net.TCPConn, a stream *net.UnixConn, an *os.File,
// another Unwrapper, or any other value that implements syscall.Conn and
// whose descriptor carries exactly the wrapper's bytes. It returns nil when
// that is not true right now, for example while the wrapper still holds
// buffered bytes that have not been read from it; a nil *net.TCPConn,
// *net.UnixConn or *os.File counts as nil. Types that transform
// their bytes (TLS, compression) must not implement it; a copy never looks
// inside a type that does not.
type Unwrapper interface {
	UnwrapConn() any
}

// unwrap peels Unwrapper layers off v. It returns v itself, and false, if
// any layer refuses (returns nil): the bytes of that layer are not all in
// its descriptor, so nothing under it may be used either.
func unwrap(v any) (any, bool) {
	orig, peeled := v, false
	for range maxUnwrap {
		u, ok := v.(Unwrapper)
		if !ok {
			return v, peeled
		}
		w := u.UnwrapConn()
		if nilConn(w) {
			return orig, false
		}
		v, peeled = w, true
	}
	if _, ok := v.(Unwrapper); ok {
		// Deeper than maxUnwrap (or a cycle): the layers below were
		// never asked, so none of them may be bypassed.
		return orig, false
	}
	return v, peeled
}
