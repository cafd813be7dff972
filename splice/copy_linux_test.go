package splice

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// wantPath is the path a pair is expected to take.
func wantPath(src, dst string, limit int64) path {
	sock := func(e string) bool { return e == "tcp" || e == "unix" }
	zeroCopy := limit == 0 || limit >= minZeroCopy
	switch {
	case src == "unix" && dst == "tcp" && (limit == 0 || limit > smallCopy):
		return pathBuffer
	case src == "file" && dst == "tcp" && (limit == 0 || limit >= fileSpliceMin):
		return pathSplice
	case src == "file" && sock(dst) && zeroCopy:
		return pathSendfile
	case sock(src) && sock(dst) && zeroCopy:
		return pathSplice
	case limit > 0 && limit <= smallCopy:
		return pathBuffer
	case src == "file" && dst == "file":
		return pathCopyFileRange
	case src == "file":
		return pathSendfile
	}
	return pathSplice
}

func pathCount(s Stats, p path) uint64 {
	return [nPaths]uint64{s.BufferCopies, s.SpliceCopies, s.SendfileCopies, s.CopyFileRangeCopies}[p]
}

// TestEveryPair copies between every pair of descriptor kinds, to EOF and
// with limits below and above the length, and checks the bytes by hash,
// the count, what is left in src, and the path taken.
func TestEveryPair(t *testing.T) {
	const size = 3<<20 + 12345
	data := payload(size, 1)
	for _, se := range ends {
		for _, de := range ends {
			for _, lim := range []int64{0, 1000, 10_000, 1<<20 + 7, size + 100} {
				name := se.name + "-to-" + de.name + "/limit=" + itoa(int(lim))
				t.Run(name, func(t *testing.T) {
					src := se.src(t, data)
					dst := de.dst(t)
					before := ReadStats()
					n, err := (&Copier{Limit: lim}).Copy(dst.dst, src.src)
					want := int64(size)
					if lim != 0 && lim < want {
						want = lim
					}
					if err != nil || n != want {
						t.Fatalf("Copy = %d, %v; want %d, nil", n, err, want)
					}
					got := dst.result()
					if len(got) != int(want) || sum(got) != sum(data[:want]) {
						t.Fatalf("dst got %d bytes (hash match %v), want %d", len(got), sum(got) == sum(data[:want]), want)
					}
					// The rest must still be in src, in order.
					rest, err := io.ReadAll(src.src)
					if err != nil || !bytes.Equal(rest, data[want:]) {
						t.Fatalf("src rest: %d bytes, %v; want %d", len(rest), err, size-int(want))
					}
					src.done()
					after := ReadStats()
					if p := wantPath(se.name, de.name, lim); pathCount(after, p) == pathCount(before, p) {
						t.Errorf("path %d not counted: before %+v after %+v", p, before, after)
					}
				})
			}
		}
	}
}

// TestSendfileProbe: a copy from an *os.File to a socket tries sendfile(2)
// before it knows what the file is. A pipe refuses it with EINVAL before
// giving up a byte; the copy then reads the pipe, and the refused probe
// counts neither as a sendfile copy nor as a fallback.
func TestSendfileProbe(t *testing.T) {
	for _, lim := range []int64{10_000, 1 << 20} {
		t.Run("limit="+itoa(int(lim)), func(t *testing.T) {
			data := payload(3<<20, 9)
			r, w := pipePair(t)
			done := feed(w, data)
			dst := ends[0].dst(t) // tcp
			before := ReadStats()
			n, err := CopyN(dst.dst, r, lim)
			after := ReadStats()
			if err != nil || n != lim {
				t.Fatalf("CopyN = %d, %v; want %d, nil", n, err, lim)
			}
			if got := dst.result(); !bytes.Equal(got, data[:lim]) {
				t.Fatalf("dst got %d bytes, want the first %d", len(got), lim)
			}
			rest, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(rest, data[lim:]) {
				t.Fatalf("pipe rest: %d bytes, %v; want %d", len(rest), err, len(data)-int(lim))
			}
			done()
			if after.SendfileCopies != before.SendfileCopies || after.Fallbacks != before.Fallbacks {
				t.Errorf("stats before %+v after %+v", before, after)
			}
		})
	}
}

// TestCopyNEOF: fewer bytes than asked gives io.EOF and the true count.
func TestCopyNEOF(t *testing.T) {
	for _, se := range ends {
		t.Run(se.name, func(t *testing.T) {
			data := payload(100_000, 2)
			src := se.src(t, data)
			dst := ends[0].dst(t)
			n, err := CopyN(dst.dst, src.src, 200_000)
			if err != io.EOF || n != int64(len(data)) {
				t.Fatalf("CopyN = %d, %v; want %d, io.EOF", n, err, len(data))
			}
			if got := dst.result(); !bytes.Equal(got, data) {
				t.Fatalf("dst got %d bytes", len(got))
			}
			src.done()
		})
	}
}

// TestPeerReset: src's peer resets the connection mid-stream. The copy
// fails with ECONNRESET and reports exactly the bytes dst's peer got.
func TestPeerReset(t *testing.T) {
	for _, de := range ends {
		t.Run("tcp-to-"+de.name, func(t *testing.T) {
			a, b := tcpPair(t)
			dst := de.dst(t)
			data := payload(1<<20, 3)
			go func() {
				b.Write(data)
				time.Sleep(50 * time.Millisecond)
				b.SetLinger(0) // close sends RST
				b.Close()
			}()
			n, err := Copy(dst.dst, a)
			got := dst.result()
			if int64(len(got)) != n || !bytes.Equal(got, data[:n]) {
				t.Fatalf("Copy reported %d, dst got %d", n, len(got))
			}
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("err = %v, want ECONNRESET", err)
			}
			var oe *net.OpError
			if !errors.As(err, &oe) || oe.Op != "read" {
				t.Fatalf("err = %#v, want a read *net.OpError", err)
			}
		})
	}
}

// TestSrcDeadline: a read deadline on src ends an idle copy.
func TestSrcDeadline(t *testing.T) {
	for _, se := range []string{"tcp", "unix", "pipe"} {
		t.Run(se, func(t *testing.T) {
			var src interface {
				io.Reader
				SetReadDeadline(time.Time) error
			}
			switch se {
			case "tcp":
				src, _ = tcpPair(t)
			case "unix":
				src, _ = unixPair(t)
			case "pipe":
				src, _ = pipePair(t)
			}
			dst := ends[1].dst(t)
			src.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := Copy(dst.dst, src)
			if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Copy = %d, %v; want 0, deadline exceeded", n, err)
			}
		})
	}
}

// TestDstDeadline: dst's peer stops reading; the write deadline ends the
// copy, and the count is exactly what the peer then finds.
func TestDstDeadline(t *testing.T) {
	for _, de := range []string{"tcp", "unix", "pipe"} {
		t.Run(de, func(t *testing.T) {
			src, peer := tcpPair(t)
			data := payload(16<<20, 4)
			go peer.Write(data) // fails when src closes
			var dst interface {
				io.Writer
				SetWriteDeadline(time.Time) error
				Close() error
			}
			var far io.Reader
			switch de {
			case "tcp":
				dst, far = tcpPair(t)
			case "unix":
				dst, far = unixPair(t)
			case "pipe":
				far, dst = pipePair(t)
			}
			dst.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			n, err := Copy(dst, src)
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Copy = %d, %v; want deadline exceeded", n, err)
			}
			var oe *net.OpError
			var pe *os.PathError
			if !errors.As(err, &oe) && !errors.As(err, &pe) {
				t.Fatalf("err %#v is neither *net.OpError nor *os.PathError", err)
			}
			dst.Close()
			got, _ := io.ReadAll(far)
			if int64(len(got)) != n || !bytes.Equal(got, data[:n]) {
				t.Fatalf("Copy reported %d, dst's peer got %d", n, len(got))
			}
			src.Close()
		})
	}
}

// TestCloseUnblocks: closing either end unblocks a copy waiting on it.
func TestCloseUnblocks(t *testing.T) {
	t.Run("src", func(t *testing.T) {
		src, _ := tcpPair(t)
		dst, _ := unixPair(t)
		done := make(chan error, 1)
		go func() { _, err := Copy(dst, src); done <- err }()
		time.Sleep(50 * time.Millisecond)
		src.Close()
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("err = %v, want net.ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Copy still blocked after src.Close")
		}
	})
	t.Run("dst", func(t *testing.T) {
		src, peer := unixPair(t)
		dst, _ := tcpPair(t) // peer never reads
		go peer.Write(payload(16<<20, 5))
		done := make(chan error, 1)
		go func() { _, err := Copy(dst, src); done <- err }()
		time.Sleep(100 * time.Millisecond)
		dst.Close()
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("err = %v, want net.ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Copy still blocked after dst.Close")
		}
		src.Close()
	})
	t.Run("src-file-while-dst-full", func(t *testing.T) {
		// sendfile waits for dst without holding src: closing the
		// file returns at once, and dst's close ends the copy.
		name := filepath.Join(t.TempDir(), "f")
		os.WriteFile(name, payload(16<<20, 6), 0o600)
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		dst, _ := tcpPair(t)
		done := make(chan error, 1)
		go func() { _, err := Copy(dst, f); done <- err }()
		time.Sleep(100 * time.Millisecond)
		closed := make(chan struct{})
		go func() { f.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatal("closing src blocked behind the copy")
		}
		dst.Close()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("Copy succeeded after both ends closed")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Copy still blocked")
		}
	})
}

// TestTinyPipes copies through one-page pipes.
func TestTinyPipes(t *testing.T) {
	for _, pair := range [][2]int{{0, 1}, {1, 2}, {1, 1}, {2, 0}} {
		se, de := ends[pair[0]], ends[pair[1]]
		t.Run(se.name+"-to-"+de.name, func(t *testing.T) {
			data := payload(1<<20+3, 7)
			src := se.src(t, data)
			dst := de.dst(t)
			var calls int
			var total int64
			// The limit keeps socket pairs on splice alone: without one
			// they read their first bytes after each wait (interactive).
			c := Copier{PipeSize: 1, Limit: int64(len(data)), Progress: func(n int64) {
				calls++
				total += n
				if n > 4096 {
					t.Errorf("chunk of %d bytes through a 4096-byte pipe", n)
				}
			}}
			n, err := c.Copy(dst.dst, src.src)
			if err != nil || n != int64(len(data)) || total != n {
				t.Fatalf("Copy = %d, %v; progress total %d", n, err, total)
			}
			if got := dst.result(); !bytes.Equal(got, data) {
				t.Fatal("content differs")
			}
			src.done()
			if calls < len(data)/4096 {
				t.Fatalf("%d progress calls for %d bytes", calls, n)
			}
		})
	}
}

// TestRescue: dst refuses splice (O_APPEND files do, splice(2) EINVAL)
// after src filled the pipe; the bytes must still arrive, by Write.
func TestRescue(t *testing.T) {
	a, b := tcpPair(t)
	data := payload(2<<20, 8)
	done := feed(b, data)
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "app"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before := ReadStats()
	n, err := Copy(f, a)
	done()
	if err != nil || n != int64(len(data)) {
		t.Fatalf("Copy = %d, %v", n, err)
	}
	got, _ := os.ReadFile(f.Name())
	if !bytes.Equal(got, data) {
		t.Fatalf("file holds %d bytes, differs", len(got))
	}
	after := ReadStats()
	if after.Rescued == before.Rescued || after.Fallbacks == before.Fallbacks || after.BufferCopies == before.BufferCopies {
		t.Fatalf("stats before %+v after %+v", before, after)
	}
}

// TestNotSpliceable: ends with descriptors that splice cannot use take the
// buffered path and lose nothing.
func TestNotSpliceable(t *testing.T) {
	t.Run("unixgram-src", func(t *testing.T) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
		if err != nil {
			t.Skip(err)
		}
		fa, fb := os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b")
		ca, _ := net.FileConn(fa)
		cb, _ := net.FileConn(fb)
		fa.Close()
		fb.Close()
		defer ca.Close()
		defer cb.Close()
		cb.Write([]byte("hello"))
		cb.Write([]byte("world"))
		dst := ends[0].dst(t)
		before := ReadStats()
		n, err := CopyN(dst.dst, ca, 10)
		if n != 10 || err != nil {
			t.Fatalf("CopyN = %d, %v", n, err)
		}
		if got := dst.result(); string(got) != "helloworld" {
			t.Fatalf("got %q", got)
		}
		if ReadStats().BufferCopies == before.BufferCopies {
			t.Fatal("not counted as buffered")
		}
	})
	t.Run("blocking-pipe", func(t *testing.T) {
		r, w := blockingPipe(t)
		defer r.Close()
		data := payload(300_000, 9)
		done := feed(w, data)
		dst := ends[1].dst(t)
		n, err := Copy(dst.dst, r)
		done()
		if n != int64(len(data)) || err != nil {
			t.Fatalf("Copy = %d, %v", n, err)
		}
		if got := dst.result(); !bytes.Equal(got, data) {
			t.Fatal("content differs")
		}
	})
	// A blocking stream socket in an *os.File (stdin under inetd, systemd
	// socket activation with Accept=yes, or socat's EXEC) is not in the
	// netpoller either: splice(2) from it may answer EAGAIN, which nothing
	// can wait for. It is read with Read, as a blocking pipe is.
	t.Run("blocking-socket-src", func(t *testing.T) {
		for _, lim := range []int64{0, 10_000, 1 << 20} {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Skip(err)
			}
			r, w := os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
			data := payload(2<<20, 12)
			done := feed(w, data)
			dst := ends[0].dst(t) // tcp
			want := int64(len(data))
			if lim != 0 {
				want = lim
			}
			n, err := (&Copier{Limit: lim}).Copy(dst.dst, r)
			r.Close()
			done()
			if n != want || err != nil {
				t.Fatalf("limit %d: Copy = %d, %v; want %d, nil", lim, n, err, want)
			}
			if got := dst.result(); !bytes.Equal(got, data[:want]) {
				t.Fatalf("limit %d: dst got %d bytes, differs", lim, len(got))
			}
		}
	})
	// An *os.File dst is spliced into before it is classified (choose):
	// a blocking pipe fills and answers EAGAIN, which the netpoller
	// cannot wait for, so the bytes in the copy's pipe go on by Write.
	t.Run("blocking-pipe-dst", func(t *testing.T) {
		r, w := blockingPipe(t)
		defer r.Close()
		a, b := tcpPair(t)
		data := payload(2<<20, 10)
		done := feed(b, data)
		result := collect(r)
		before := ReadStats()
		n, err := Copy(w, a)
		done()
		w.Close()
		if n != int64(len(data)) || err != nil {
			t.Fatalf("Copy = %d, %v", n, err)
		}
		if got := result(); !bytes.Equal(got, data) {
			t.Fatalf("pipe delivered %d bytes, differs", len(got))
		}
		if after := ReadStats(); after.Rescued == before.Rescued || after.Fallbacks == before.Fallbacks {
			t.Fatalf("no rescue counted: before %+v after %+v", before, after)
		}
	})
	// A datagram socket as dst: whatever splice does into it, every byte
	// arrives once and in order.
	t.Run("unixgram-dst", func(t *testing.T) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Skip(err)
		}
		w, r := os.NewFile(uintptr(fds[0]), "w"), os.NewFile(uintptr(fds[1]), "r")
		defer r.Close()
		a, b := tcpPair(t)
		data := payload(1<<20, 11)
		done := feed(b, data)
		got := make(chan []byte, 1)
		go func() {
			var all []byte
			buf := make([]byte, 1<<20)
			for len(all) < len(data) {
				n, err := r.Read(buf)
				if err != nil || n == 0 {
					break
				}
				all = append(all, buf[:n]...)
			}
			got <- all
		}()
		n, err := Copy(w, a)
		done()
		w.Close()
		if n != int64(len(data)) || err != nil {
			t.Fatalf("Copy = %d, %v", n, err)
		}
		select {
		case g := <-got:
			if !bytes.Equal(g, data) {
				t.Fatalf("socket delivered %d bytes, differs", len(g))
			}
		case <-time.After(20 * time.Second):
			t.Fatal("datagrams did not all arrive")
		}
	})
}

// blockingPipe returns a pipe in blocking mode, which os.NewFile leaves
// out of the netpoller (os.Pipe makes non-blocking ones).
func blockingPipe(t *testing.T) (r, w *os.File) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
}

// TestIdleHoldsNothing: copies waiting for src hold no pipe and no buffer,
// on the splice path and on the buffered path, then all complete once
// bytes arrive.
func TestIdleHoldsNothing(t *testing.T) {
	for _, size := range []int{2, 1 << 20} {
		t.Run("size="+itoa(size), func(t *testing.T) { testIdle(t, size) })
	}
}

func testIdle(t *testing.T, size int) {
	const conns = 200
	type pair struct {
		src, feed *net.TCPConn
		dst, far  *net.UnixConn
	}
	ps := make([]pair, conns)
	for i := range ps {
		ps[i].src, ps[i].feed = tcpPair(t)
		ps[i].dst, ps[i].far = unixPair(t)
	}
	base := ReadStats()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range ps {
		wg.Go(func() {
			// Each copy first moves one byte, so it has used a pipe or
			// a buffer, then waits idle.
			n, err := CopyN(ps[i].dst, ps[i].src, int64(size))
			if err != nil || n != int64(size) {
				errs <- fmt.Errorf("CopyN = %d, %v", n, err)
			}
		})
	}
	for i := range ps {
		ps[i].feed.Write([]byte{1})
	}
	for i := range ps {
		var b [1]byte
		io.ReadFull(ps[i].far, b[:])
	}
	// Each copy gives its pipe or buffer back right after its byte
	// reached dst; allow a loaded machine some time to get there.
	var idle Stats
	for range 100 {
		idle = ReadStats()
		if idle.PipesInUse == base.PipesInUse && idle.BuffersInUse == base.BuffersInUse {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if idle.PipesInUse != base.PipesInUse || idle.BuffersInUse != base.BuffersInUse {
		t.Errorf("%d idle copies hold %d pipes and %d buffers", conns,
			idle.PipesInUse-base.PipesInUse, idle.BuffersInUse-base.BuffersInUse)
	}
	if idle.PipesReused+idle.PipesCreated == base.PipesReused+base.PipesCreated &&
		idle.BuffersBorrowed == base.BuffersBorrowed {
		t.Error("the copies used neither pipe nor buffer")
	}
	rest := make([]byte, size-1)
	for i := range ps {
		go ps[i].feed.Write(rest)
		go io.Copy(io.Discard, ps[i].far)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestFDLeak: 10,000 copies, some of them failing with bytes in the pipe,
// leave the descriptor count where it was once the pool is collected.
func TestFDLeak(t *testing.T) {
	start := countFDs()
	if start < 0 {
		t.Skip("no /proc/self/fd")
	}
	func() {
		src, feed := tcpPair(t)
		dst, far := unixPair(t)
		const copies, size = 10_000, 1000
		go func() {
			b := make([]byte, size)
			for range copies {
				if _, err := feed.Write(b); err != nil {
					return
				}
			}
		}()
		go io.Copy(io.Discard, far)
		for i := range copies {
			if n, err := CopyN(dst, src, size); err != nil || n != size {
				t.Fatalf("copy %d: %d, %v", i, n, err)
			}
		}
		// Failing copies leave bytes in pipes, which must be destroyed.
		for range 20 {
			s, f := tcpPair(t)
			d, dp := tcpPair(t)
			go f.Write(payload(8<<20, 10))
			d.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
			Copy(d, s)
			s.Close()
			f.Close()
			d.Close()
			dp.Close()
		}
		src.Close()
		feed.Close()
		dst.Close()
		far.Close()
	}()
	if n := waitFDs(start); n > start {
		t.Fatalf("%d descriptors open, %d at start (stats %+v): %v", n, start, ReadStats(), listFDs())
	}
}

// TestConcurrent runs many copies of every path at once (for -race).
func TestConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for i := range 24 {
		se, de := ends[i%len(ends)], ends[(i/len(ends))%len(ends)]
		data := payload(200_000+i, uint64(i))
		src := se.src(t, data)
		dst := de.dst(t)
		wg.Go(func() {
			c := Copier{PipeSize: 4096 << (i % 5)}
			for range 3 {
				n, err := c.Copy(dst.dst, io.LimitReader(src.src, int64(len(data)/3)))
				if err != nil || n != int64(len(data)/3) {
					t.Errorf("%s-to-%s: %d, %v", se.name, de.name, n, err)
					return
				}
			}
			rest, _ := Copy(dst.dst, src.src)
			src.done()
			if got := dst.result(); !bytes.Equal(got, data) || rest != int64(len(data)-3*(len(data)/3)) {
				t.Errorf("%s-to-%s: content differs", se.name, de.name)
			}
		})
	}
	wg.Wait()
}

// TestPaths checks which path the wrappers and fallbacks take.
func TestPaths(t *testing.T) {
	data := payload(100_000, 15)
	cases := []struct {
		name string
		src  func(t *testing.T) (io.Reader, func())
		want path
	}{
		{"embedding", func(t *testing.T) (io.Reader, func()) {
			a, b := tcpPair(t)
			return xorConn{a}, feed(b, data)
		}, pathBuffer},
		{"unwrapper", func(t *testing.T) (io.Reader, func()) {
			a, b := tcpPair(t)
			return &countConn{TCPConn: a}, feed(b, data)
		}, pathSplice},
		{"unwrapper-held", func(t *testing.T) (io.Reader, func()) {
			a, b := tcpPair(t)
			return &countConn{TCPConn: a, held: true}, feed(b, data)
		}, pathBuffer},
		{"unknown-syscall-conn", func(t *testing.T) (io.Reader, func()) {
			a, b := unixPair(t)
			return selfUnwrap{rawOnly{a}}, feed(b, data)
		}, pathSplice},
		{"tls", func(t *testing.T) (io.Reader, func()) {
			srv, cli := tlsPair(t)
			return cli, feed(srv, data)
		}, pathBuffer},
		{"bytes.Reader", func(t *testing.T) (io.Reader, func()) {
			return bytes.NewReader(data), func() {}
		}, pathBuffer},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src, done := c.src(t)
			dst := ends[0].dst(t)
			before := ReadStats()
			n, err := Copy(dst.dst, src)
			done()
			after := ReadStats()
			if err != nil || n != int64(len(data)) {
				t.Fatalf("Copy = %d, %v", n, err)
			}
			if pathCount(after, c.want) == pathCount(before, c.want) {
				t.Fatalf("path %d not taken: before %+v after %+v", c.want, before, after)
			}
			if got := dst.result(); !bytes.Equal(got, data) && c.name != "embedding" {
				t.Fatal("content differs")
			}
		})
	}
}

// TestNoPipes: when pipe2(2) fails (EMFILE here, from a real descriptor
// limit) the copy moves every byte through a buffer instead.
func TestNoPipes(t *testing.T) {
	src, feedEnd := tcpPair(t)
	dst, far := unixPair(t)
	data := payload(1<<20, 17)
	done := feed(feedEnd, data)
	res := collect(far)
	// Let the pool drop its idle pipes, so the copy must make one.
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = uint64(maxFD() + 1) // every descriptor number in use
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	// Fill the gaps below the limit too.
	var fillers []int
	for range 1000 {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		fillers = append(fillers, fd)
	}
	defer func() {
		for _, fd := range fillers {
			unix.Close(fd)
		}
	}()
	var fds [2]int
	perr := unix.Pipe2(fds[:], unix.O_CLOEXEC)
	if perr == nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
	}
	before := ReadStats()
	var n int64
	var err error
	if perr != nil {
		n, err = Copy(dst, src)
	}
	after := ReadStats()
	unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
	if perr == nil {
		t.Skip("pipe2 still works under the lowered limit")
	}
	done()
	dst.CloseWrite()
	if err != nil || n != int64(len(data)) || !bytes.Equal(res(), data) {
		t.Fatalf("Copy = %d, %v", n, err)
	}
	if after.PipeErrors == before.PipeErrors || after.BufferCopies == before.BufferCopies || after.Fallbacks == before.Fallbacks {
		t.Fatalf("stats before %+v after %+v", before, after)
	}
}

// maxFD returns the highest open descriptor number.
func maxFD() int {
	d, _ := os.ReadDir("/proc/self/fd")
	m := 0
	for _, e := range d {
		var n int
		fmt.Sscan(e.Name(), &n)
		m = max(m, n)
	}
	return m
}

// TestProgressMayClose: Progress runs outside every descriptor lock, so
// closing an end from inside it ends the copy instead of deadlocking.
func TestProgressMayClose(t *testing.T) {
	for _, end := range []string{"src", "dst"} {
		for _, se := range ends[:3] { // tcp, unix, pipe: splice and buffered paths
			t.Run(se.name+"/close-"+end, func(t *testing.T) {
				src := se.src(t, payload(8<<20, 18))
				dst, far := tcpPair(t)
				go io.Copy(io.Discard, far)
				c := Copier{Progress: func(int64) {
					if end == "src" {
						src.src.(io.Closer).Close()
					} else {
						dst.Close()
					}
				}}
				done := make(chan error, 1)
				go func() { _, err := c.Copy(dst, src.src); done <- err }()
				select {
				case err := <-done:
					if !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrClosed) {
						t.Fatalf("err = %v, want a closed error", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("Copy deadlocked after Close from Progress")
				}
			})
		}
	}
}

// TestProgressPanic: a Progress that panics, recovered by the caller (as
// net/http recovers a handler), leaves no pipe or buffer counted as in use,
// on any path.
func TestProgressPanic(t *testing.T) {
	for _, pair := range [][2]int{{1, 0}, {0, 0}, {3, 0}, {2, 3}} { // unix-tcp, tcp-tcp, file-tcp, pipe-file
		se, de := ends[pair[0]], ends[pair[1]]
		for _, lim := range []int64{0, 10_000} {
			t.Run(se.name+"-to-"+de.name+"/limit="+itoa(int(lim)), func(t *testing.T) {
				src := se.src(t, payload(1<<20, 19))
				dst := de.dst(t)
				before := ReadStats()
				func() {
					defer func() {
						if recover() == nil {
							t.Error("Progress did not panic")
						}
					}()
					c := Copier{Limit: lim, Progress: func(int64) { panic("progress") }}
					c.Copy(dst.dst, src.src)
				}()
				after := ReadStats()
				if after.PipesInUse != before.PipesInUse || after.BuffersInUse != before.BuffersInUse {
					t.Fatalf("in use after a panic: pipes %d, buffers %d",
						after.PipesInUse-before.PipesInUse, after.BuffersInUse-before.BuffersInUse)
				}
				if c, ok := src.src.(io.Closer); ok {
					c.Close()
				}
			})
		}
	}
}

// TestInteractive relays like a proxy (tcp to tcp, no limit): short
// messages go by read(2) and write(2) without a pipe, a bulk burst goes by
// splice, and short messages after it by read and write again.
func TestInteractive(t *testing.T) {
	client, src := tcpPair(t)
	dst, server := tcpPair(t)
	done := make(chan error, 1)
	var copied int64
	go func() {
		n, err := Copy(dst, src)
		copied = n
		done <- err
	}()
	buf := make([]byte, 8<<20)
	var sent int64
	// exchange sends msgs messages one at a time, each read by the server
	// before the next is sent; the first pauses of them are followed by a
	// pause, in which the copy finds src empty.
	exchange := func(msgs, size int, seed uint64, pauses int) {
		t.Helper()
		for i := range msgs {
			if i > 0 && i <= pauses {
				time.Sleep(20 * time.Millisecond)
			}
			m := payload(size, seed+uint64(i))
			// Write while the server reads: the sockets and the pipe
			// between them need not hold a whole bulk message.
			werr := make(chan error, 1)
			go func() { _, err := client.Write(m); werr <- err }()
			server.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(server, buf[:size]); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			if err := <-werr; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf[:size], m) {
				t.Fatalf("message %d differs", i)
			}
			sent += int64(size)
		}
	}
	// Byte counts reach Stats when a copy ends; pipe counts at once.
	pipes := func() uint64 { s := ReadStats(); return s.PipesCreated + s.PipesReused }
	s0, p0 := ReadStats(), pipes()
	exchange(200, 100, 1, 0)
	if p := pipes(); p-p0 > 5 { // spliced, each would take one
		t.Fatalf("short messages took %d pipes", p-p0)
	}
	exchange(1, 8<<20, 2, 0) // bulk
	p1 := pipes()
	if p1 == p0 {
		t.Fatal("bulk took no pipe")
	}
	// After a bulk burst the copy splices until it waits for src after
	// fewer than 16 KiB. Messages sent back to back need not give it that
	// wait: on a loaded machine the copy can find each one already there
	// and keep splicing. The pauses after the first three make sure it
	// waits; every later message must then go by read and write.
	exchange(200, 100, 3, 3)
	if p := pipes(); p-p1 > 10 {
		t.Fatalf("short messages after bulk took %d pipes", p-p1)
	}
	client.Close()
	if err := <-done; err != nil || copied != sent {
		t.Fatalf("Copy = %d, %v; sent %d", copied, err, sent)
	}
	s1 := ReadStats()
	if b, sp := s1.BufferBytes-s0.BufferBytes, s1.SpliceBytes-s0.SpliceBytes; b < 2*200*100 || sp < 4<<20 || b+sp != uint64(sent) {
		t.Fatalf("%d bytes by buffer, %d by splice, of %d", b, sp, sent)
	}
}

// TestDstPeerResetProxy: dst's peer resets the connection while a proxy's
// copy (no limit, which writes with raw system calls) carries short
// messages and then bulk to it. The copy fails with a write
// *net.OpError naming dst, ECONNRESET or EPIPE, and does not hang.
func TestDstPeerResetProxy(t *testing.T) {
	for _, size := range []int{100, 256 << 10} {
		t.Run("size="+itoa(size), func(t *testing.T) {
			client, src := tcpPair(t)
			dst, server := tcpPair(t)
			done := make(chan error, 1)
			go func() { _, err := Copy(dst, src); done <- err }()
			msg := make([]byte, size)
			client.Write(msg)
			server.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(server, msg); err != nil {
				t.Fatal(err)
			}
			server.SetLinger(0) // close sends RST
			server.Close()
			var err error
		loop:
			for range 1000 {
				client.SetWriteDeadline(time.Now().Add(10 * time.Second))
				if _, werr := client.Write(msg); werr != nil {
					t.Fatalf("client write: %v", werr)
				}
				select {
				case err = <-done:
					break loop
				case <-time.After(time.Millisecond):
				}
			}
			if err == nil {
				t.Fatal("copy to a reset peer did not fail")
			}
			if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
				t.Fatalf("err = %v, want ECONNRESET or EPIPE", err)
			}
			var oe *net.OpError
			if !errors.As(err, &oe) || oe.Op != "write" || oe.Addr.String() != dst.RemoteAddr().String() {
				t.Fatalf("err = %#v, want a write *net.OpError naming dst", err)
			}
		})
	}
}
