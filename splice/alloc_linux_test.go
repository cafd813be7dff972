package splice

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/percpu"
)

// pump keeps writing to w until it fails, without allocating.
func pump(w io.Writer) {
	b := make([]byte, 64<<10)
	for {
		if _, err := w.Write(b); err != nil {
			return
		}
	}
}

// drainAll reads r until it fails, without allocating.
func drainAll(r io.Reader) {
	b := make([]byte, 64<<10)
	for {
		if _, err := r.Read(b); err != nil {
			return
		}
	}
}

// TestZeroAllocs: a steady-state copy allocates nothing, on every path.
func TestZeroAllocs(t *testing.T) {
	if percpu.RaceEnabled {
		t.Skip("sync.Pool drops items on purpose under -race")
	}
	const size = 64 << 10
	tcpSrc := func(t *testing.T) io.Reader { a, b := tcpPair(t); go pump(b); return a }
	unixSrc := func(t *testing.T) io.Reader { a, b := unixPair(t); go pump(b); return a }
	pipeSrc := func(t *testing.T) io.Reader { r, w := pipePair(t); go pump(w); return r }
	tcpDst := func(t *testing.T) io.Writer { a, b := tcpPair(t); go drainAll(b); return a }
	unixDst := func(t *testing.T) io.Writer { a, b := unixPair(t); go drainAll(b); return a }
	fileDst := func(t *testing.T) io.Writer {
		f, err := os.Create(filepath.Join(t.TempDir(), "dst"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	var file *os.File
	fileSrc := func(t *testing.T) io.Reader { file = tempFile(t, make([]byte, size)); return file }
	cases := []struct {
		name  string
		src   func(t *testing.T) io.Reader
		dst   func(t *testing.T) io.Writer
		reset func()
	}{
		{"tcp-to-tcp", tcpSrc, tcpDst, nil},
		{"unix-to-tcp", unixSrc, tcpDst, nil},
		{"tcp-to-unix", tcpSrc, unixDst, nil},
		{"unix-to-unix", unixSrc, unixDst, nil},
		{"pipe-to-unix", pipeSrc, unixDst, nil},
		{"tcp-to-file", tcpSrc, fileDst, nil},
		{"file-to-tcp", fileSrc, tcpDst, func() { file.Seek(0, io.SeekStart) }},
		{"file-to-file", fileSrc, fileDst, func() { file.Seek(0, io.SeekStart) }},
		{"bytes-to-tcp", func(t *testing.T) io.Reader {
			return bytes.NewReader(nil)
		}, tcpDst, nil},
		{"tcp-to-discard", tcpSrc, func(*testing.T) io.Writer { return io.Discard }, nil},
	}
	// 1 KiB and 4 KiB take the short-copy paths (read and write, or
	// sendfile and splice from minZeroCopy), 64 KiB the long ones.
	for _, n := range []int64{1 << 10, minZeroCopy, size} {
		for _, c := range cases {
			t.Run(c.name+"/size="+itoa(int(n)), func(t *testing.T) {
				src, dst := c.src(t), c.dst(t)
				reset := c.reset
				if br, ok := src.(*bytes.Reader); ok {
					data := make([]byte, n)
					reset = func() { br.Reset(data) }
				}
				var err error
				var got int64
				run := func() {
					if reset != nil {
						reset()
					}
					got, err = CopyN(dst, src, n)
				}
				run()
				allocs := testing.AllocsPerRun(200, run)
				if err != nil || got != n {
					t.Fatalf("CopyN = %d, %v", got, err)
				}
				if allocs != 0 {
					t.Fatalf("%v allocations per copy", allocs)
				}
				if c, ok := dst.(net.Conn); ok {
					c.Close()
				}
			})
		}
	}
}

// TestNoGoroutines: a copy starts no goroutine and leaves none behind,
// on the splice, sendfile and buffered paths.
func TestNoGoroutines(t *testing.T) {
	src, feed := tcpPair(t)
	dst, far := unixPair(t)
	go pump(feed)
	go drainAll(far)
	f := tempFile(t, make([]byte, 1<<20))
	time.Sleep(10 * time.Millisecond)
	before := runtime.NumGoroutine()
	for i := range 100 {
		var err error
		switch i % 3 {
		case 0:
			_, err = CopyN(dst, src, 256<<10) // splice
		case 1:
			_, err = CopyN(dst, src, 1000) // buffered
		case 2:
			f.Seek(0, io.SeekStart)
			_, err = Copy(dst, f) // sendfile
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if after := runtime.NumGoroutine(); after != before {
		t.Fatalf("%d goroutines before the copies, %d after", before, after)
	}
}

// TestProxyZeroAllocs: a proxy's copy (no limit, two stream sockets),
// which uses raw system calls and turns between its interactive read and
// write path and splice as the traffic changes, allocates nothing once it
// runs, whichever path each burst takes.
func TestProxyZeroAllocs(t *testing.T) {
	if percpu.RaceEnabled {
		t.Skip("sync.Pool drops items on purpose under -race")
	}
	pairs := []struct {
		name     string
		src, dst func(testing.TB) (net.Conn, net.Conn)
	}{
		{"tcp-to-tcp", tcpConns, tcpConns},
		{"unix-to-unix", unixConns, unixConns},
		{"unix-to-tcp", unixConns, tcpConns},
		{"tcp-to-unix", tcpConns, unixConns},
	}
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			client, src := p.src(t)
			dst, server := p.dst(t)
			done := make(chan error, 1)
			go func() { _, err := Copy(dst, src); done <- err }()
			var got atomic.Int64
			go func() {
				b := make([]byte, 64<<10)
				for {
					n, err := server.Read(b)
					got.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
			small, bulk := make([]byte, 100), make([]byte, 64<<10)
			var sent int64
			round := func() {
				for range 20 { // messages, each after a pause
					time.Sleep(200 * time.Microsecond)
					n, _ := client.Write(small)
					sent += int64(n)
				}
				for range 16 { // 1 MiB back to back
					n, _ := client.Write(bulk)
					sent += int64(n)
				}
				deadline := time.Now().Add(10 * time.Second)
				for got.Load() < sent && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
			}
			// The pools the copy takes its pipe and buffer from cache
			// per P: on one P, and with no collection to empty them,
			// each Get finds what the last Put left.
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
			round() // warm up pools, timers and the copy's pipe
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			for range 3 {
				round()
			}
			runtime.ReadMemStats(&m1)
			if got.Load() != sent {
				t.Fatalf("server got %d of %d bytes", got.Load(), sent)
			}
			if n := m1.Mallocs - m0.Mallocs; n != 0 {
				t.Errorf("%d allocations in three rounds of messages and bulk", n)
			}
			client.Close()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

func tcpConns(t testing.TB) (net.Conn, net.Conn)  { return tcpPair(t) }
func unixConns(t testing.TB) (net.Conn, net.Conn) { return unixPair(t) }
