package splice

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// writerFunc and readerFunc are func-typed ends: not comparable, and
// valid arguments to io.Copy.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

func TestUncomparableEnds(t *testing.T) {
	t.Run("dst", func(t *testing.T) {
		var got bytes.Buffer
		n, err := Copy(writerFunc(got.Write), tempFile(t, []byte("hello")))
		if err != nil || n != 5 || got.String() != "hello" {
			t.Fatalf("Copy = %d, %v, %q", n, err, got.String())
		}
	})
	t.Run("src", func(t *testing.T) {
		done := false
		r := readerFunc(func(p []byte) (int, error) {
			if done {
				return 0, io.EOF
			}
			done = true
			return copy(p, "hello"), nil
		})
		a, b := tcpPair(t)
		res := collect(b)
		n, err := Copy(a, r)
		a.Close()
		if got := res(); err != nil || n != 5 || string(got) != "hello" {
			t.Fatalf("Copy = %d, %v, %q", n, err, got)
		}
	})
}

// headerConn holds bytes it read past a header, and refuses to unwrap
// until they are read, as the Unwrapper contract asks.
type headerConn struct {
	*net.TCPConn
	buf []byte
}

func (c *headerConn) Read(p []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	return c.TCPConn.Read(p)
}

func (c *headerConn) UnwrapConn() any {
	if len(c.buf) > 0 {
		return nil
	}
	return c.TCPConn
}

// meterConn is a pass-through layer over a headerConn.
type meterConn struct{ inner *headerConn }

func (m *meterConn) Read(p []byte) (int, error) { return m.inner.Read(p) }
func (m *meterConn) UnwrapConn() any            { return m.inner }

// An inner layer that refuses to unwrap keeps every layer above it from
// being bypassed: its buffered bytes come first.
func TestNestedUnwrapperHoldingBytes(t *testing.T) {
	copyBufferedHead(t, func(h *headerConn) io.Reader { return &meterConn{h} })
}

// copyBufferedHead copies into a pipe from wrap's layers over a headerConn
// that holds "buffered-head" while its peer sends "-tail-of-stream", and
// checks that every byte arrives, in order.
func copyBufferedHead(t *testing.T, wrap func(*headerConn) io.Reader) {
	t.Helper()
	a, b := tcpPair(t)
	go func() { b.Write([]byte("-tail-of-stream")); b.Close() }()
	src := wrap(&headerConn{TCPConn: a, buf: []byte("buffered-head")})
	r, w := pipePair(t)
	res := collect(r)
	n, err := Copy(w, src)
	w.Close()
	const want = "buffered-head-tail-of-stream"
	if got := res(); err != nil || n != int64(len(want)) || string(got) != want {
		t.Fatalf("Copy = %d, %v; dst got %q, want %q", n, err, got, want)
	}
}

// dataAndErr returns its last bytes together with err.
type dataAndErr struct {
	b   []byte
	err error
}

func (r *dataAndErr) Read(p []byte) (int, error) {
	n := copy(p, r.b)
	r.b = r.b[n:]
	if len(r.b) == 0 {
		return n, r.err
	}
	return n, nil
}

// CopyN: written == n if and only if err == nil, as io.CopyN.
func TestCopyNDataWithError(t *testing.T) {
	boom := errors.New("boom")
	if n, err := CopyN(io.Discard, &dataAndErr{[]byte("hello"), boom}, 5); n != 5 || err != nil {
		t.Errorf("all 5 bytes with an error: CopyN = %d, %v; want 5, nil", n, err)
	}
	if n, err := CopyN(io.Discard, &dataAndErr{[]byte("hell"), boom}, 5); n != 4 || err != boom {
		t.Errorf("4 bytes with an error: CopyN = %d, %v; want 4, boom", n, err)
	}
	if n, err := CopyN(io.Discard, &dataAndErr{[]byte("hell"), io.EOF}, 5); n != 4 || err != io.EOF {
		t.Errorf("4 bytes and EOF: CopyN = %d, %v; want 4, EOF", n, err)
	}
}

// A failed Write that moved nothing is no chunk for Progress.
func TestProgressNotCalledForNothing(t *testing.T) {
	a, b := tcpPair(t)
	go func() { b.Write(make([]byte, 100)); b.Close() }()
	var calls []int64
	c := Copier{Progress: func(n int64) { calls = append(calls, n) }}
	full := errors.New("disk full")
	fail := writerFunc(func(p []byte) (int, error) { return 0, full })
	if n, err := c.Copy(&struct{ io.Writer }{fail}, a); n != 0 || err != full {
		t.Errorf("Copy = %d, %v; want 0, disk full", n, err)
	}
	for _, k := range calls {
		if k <= 0 {
			t.Fatalf("Progress called with %d bytes (calls %v)", k, calls)
		}
	}
}

// A nil *os.File end is an error, as with io.Copy, not a panic or a
// wait. (A nil *net.TCPConn panics in its own methods, in io.Copy too.)
func TestNilFileEnds(t *testing.T) {
	a, b := tcpPair(t)
	var f *os.File
	if _, err := Copy(a, f); !errors.Is(err, os.ErrInvalid) {
		t.Errorf("Copy from a nil *os.File: %v", err)
	}
	if _, err := Copy(f, b); !errors.Is(err, os.ErrInvalid) {
		t.Errorf("Copy to a nil *os.File: %v", err)
	}
}

// Into an O_APPEND file, every path appends, as Write does
// (copy_file_range(2) refuses such a dst).
func TestAppendDst(t *testing.T) {
	for _, size := range []int{100, 64 << 10, 1 << 20} {
		data := payload(size, uint64(size))
		name := filepath.Join(t.TempDir(), "dst")
		if err := os.WriteFile(name, []byte("head"), 0o600); err != nil {
			t.Fatal(err)
		}
		dst, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		n, err := Copy(dst, tempFile(t, data))
		dst.Close()
		if err != nil || n != int64(size) {
			t.Fatalf("%d bytes: Copy = %d, %v", size, n, err)
		}
		got, _ := os.ReadFile(name)
		if !bytes.Equal(got, append([]byte("head"), data...)) {
			t.Fatalf("%d bytes: dst holds %d bytes, not head+data", size, len(got))
		}
	}
}

// An error of src's is reported as src's read, whatever path found it.
func TestSrcErrorNamesSrc(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the kernel paths are Linux's")
	}
	name := filepath.Join(t.TempDir(), "wo")
	if err := os.WriteFile(name, payload(64<<10, 3), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(name, os.O_WRONLY, 0) // not readable
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, _ := tcpPair(t)
	_, err = Copy(a, f)
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "read" || pe.Path != name {
		t.Fatalf("error %v does not name src's read", err)
	}
}

// layer is a pass-through Unwrapper over any reader.
type layer struct{ inner io.Reader }

func (l *layer) Read(p []byte) (int, error) { return l.inner.Read(p) }
func (l *layer) UnwrapConn() any            { return l.inner }

// A chain deeper than the copy looks is not bypassed: the layer it did not
// ask may hold bytes.
func TestDeepUnwrapperChain(t *testing.T) {
	copyBufferedHead(t, func(h *headerConn) io.Reader {
		var src io.Reader = h
		for range maxUnwrap {
			src = &layer{src}
		}
		return src
	})
}

// pendingConn is a wrapper whose connection is not there yet: UnwrapConn
// returns its nil field, a typed nil in an interface, not a nil one.
type pendingConn struct {
	io.Reader
	io.Writer
	tcp  *net.TCPConn
	unix *net.UnixConn
	file *os.File
	kind int
}

func (c *pendingConn) UnwrapConn() any {
	switch c.kind {
	case 0:
		return c.tcp
	case 1:
		return c.unix
	}
	return c.file
}

// A typed nil from UnwrapConn is a refusal, as nil is: the copy goes
// through the wrapper's own Read and Write, as io.Copy would, instead of
// calling a method on a nil conn.
func TestUnwrapperTypedNil(t *testing.T) {
	for kind, name := range []string{"tcp", "unix", "file"} {
		t.Run(name, func(t *testing.T) {
			var got bytes.Buffer
			src := &pendingConn{Reader: strings.NewReader("hello"), kind: kind}
			if n, err := Copy(&got, src); err != nil || n != 5 || got.String() != "hello" {
				t.Fatalf("from it: Copy = %d, %v, %q", n, err, got.String())
			}
			got.Reset()
			dst := &pendingConn{Writer: &got, kind: kind}
			if n, err := Copy(dst, tempFile(t, []byte("world"))); err != nil || n != 5 || got.String() != "world" {
				t.Fatalf("into it: Copy = %d, %v, %q", n, err, got.String())
			}
		})
	}
}

// Into a file not open for writing, a copy fails before it takes a byte
// from its source, as io.Copy does.
func TestReadOnlyDstLeavesSrc(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the kernel paths are Linux's")
	}
	for _, size := range []int{64 << 10, 1 << 20} {
		dst := tempFile(t, nil) // open for reading only
		src := tempFile(t, payload(size, 1))
		n, err := Copy(dst, src)
		off, _ := src.Seek(0, io.SeekCurrent)
		if n != 0 || err == nil || off != 0 {
			t.Errorf("%d bytes into a read-only file: Copy = %d, %v; source offset %d, want 0", size, n, err, off)
		}
	}
}

// A long copy from a file into TCP (spliced through a pipe) that fails on
// the way out leaves the file's offset just past the last byte that
// reached dst, as sendfile(2) does: bytes read into the pipe but never
// written are not skipped by the next read of the file.
func TestFileOffsetAfterFailedCopy(t *testing.T) {
	data := payload(16<<20, 7)
	for _, lim := range []int64{0, 8 << 20} {
		t.Run("limit="+itoa(int(lim)), func(t *testing.T) {
			src := tempFile(t, data)
			dst, far := tcpPair(t)
			dst.SetWriteBuffer(64 << 10)
			far.SetReadBuffer(64 << 10)
			go func() {
				io.CopyN(io.Discard, far, 1<<20)
				far.SetLinger(0)
				far.Close() // the copy's next writes fail: EPIPE or ECONNRESET
			}()
			n, err := (&Copier{Limit: lim}).Copy(dst, src)
			if err == nil {
				t.Fatalf("Copy = %d, nil; want an error after the reader went away", n)
			}
			off, serr := src.Seek(0, io.SeekCurrent)
			if serr != nil || off != n {
				t.Fatalf("after Copy = %d, %v: file offset %d, %v; want %d", n, err, off, serr, n)
			}
		})
	}
}
