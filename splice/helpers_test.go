package splice

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// payload returns n deterministic pseudo-random bytes.
func payload(n int, seed uint64) []byte {
	var key [32]byte
	key[0], key[1] = byte(seed), byte(n)
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

func sum(b []byte) [32]byte { return sha256.Sum256(b) }

// connPair returns two connected conns made by listening on addr.
func connPair(t testing.TB, network, addr string) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("listen %s: %v", network, err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	a, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c
}

// tcpPair returns two connected loopback TCP conns.
func tcpPair(t testing.TB) (*net.TCPConn, *net.TCPConn) {
	a, b := connPair(t, "tcp", "127.0.0.1:0")
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

var sockSeq struct {
	sync.Mutex
	n int
}

// unixPair returns two connected stream Unix conns.
func unixPair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	sockSeq.Lock()
	sockSeq.n++
	name := filepath.Join(os.TempDir(), "zs"+itoa(os.Getpid())+"-"+itoa(sockSeq.n)+".sock")
	sockSeq.Unlock()
	os.Remove(name)
	a, b := connPair(t, "unix", name)
	return a.(*net.UnixConn), b.(*net.UnixConn)
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

func pipePair(t testing.TB) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// A source is an end to copy from: src carries data (then EOF) written by
// a peer goroutine; done waits for the peer.
type source struct {
	src  io.Reader
	done func()
}

// A sink is an end to copy to; result closes dst and returns every byte
// its peer received.
type sink struct {
	dst    io.Writer
	result func() []byte
}

type endKind struct {
	name string
	src  func(t testing.TB, data []byte) source
	dst  func(t testing.TB) sink
}

// feed writes data to w in odd-sized pieces and closes it.
func feed(w io.WriteCloser, data []byte) func() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Close()
		for len(data) > 0 {
			n := min(len(data), 100_003)
			if _, err := w.Write(data[:n]); err != nil {
				return
			}
			data = data[n:]
		}
	}()
	return func() { <-done }
}

// collect reads r to EOF in the background.
func collect(r io.Reader) func() []byte {
	ch := make(chan []byte, 1)
	go func() {
		var b bytes.Buffer
		b.ReadFrom(r)
		ch <- b.Bytes()
	}()
	return func() []byte {
		select {
		case b := <-ch:
			return b
		case <-time.After(20 * time.Second):
			panic("collect: peer did not see EOF")
		}
	}
}

var ends = []endKind{
	{
		name: "tcp",
		src: func(t testing.TB, data []byte) source {
			a, b := tcpPair(t)
			return source{a, feed(b, data)}
		},
		dst: func(t testing.TB) sink {
			a, b := tcpPair(t)
			res := collect(b)
			return sink{a, func() []byte { a.CloseWrite(); return res() }}
		},
	},
	{
		name: "unix",
		src: func(t testing.TB, data []byte) source {
			a, b := unixPair(t)
			return source{a, feed(b, data)}
		},
		dst: func(t testing.TB) sink {
			a, b := unixPair(t)
			res := collect(b)
			return sink{a, func() []byte { a.CloseWrite(); return res() }}
		},
	},
	{
		name: "pipe",
		src: func(t testing.TB, data []byte) source {
			r, w := pipePair(t)
			return source{r, feed(w, data)}
		},
		dst: func(t testing.TB) sink {
			r, w := pipePair(t)
			res := collect(r)
			return sink{w, func() []byte { w.Close(); return res() }}
		},
	},
	{
		name: "file",
		src: func(t testing.TB, data []byte) source {
			return source{tempFile(t, data), func() {}}
		},
		dst: func(t testing.TB) sink {
			f, err := os.Create(filepath.Join(t.TempDir(), "dst"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return sink{f, func() []byte {
				b, err := os.ReadFile(f.Name())
				if err != nil {
					panic(err)
				}
				f.Close()
				return b
			}}
		},
	},
}

// countFDs returns the number of open descriptors of the process, or -1
// where /proc/self/fd does not exist.
func countFDs() int {
	d, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(d) - 1 // the ReadDir's own descriptor
}

// waitFDs waits (bounded) for the descriptor count to fall to want,
// forcing collections so that dropped pipes get closed.
func waitFDs(want int) int {
	var n int
	for range 100 {
		runtime.GC()
		n = countFDs()
		if n <= want {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
	return n
}

// listFDs names the open descriptors, for failure messages.
func listFDs() []string {
	d, _ := os.ReadDir("/proc/self/fd")
	var s []string
	for _, e := range d {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		s = append(s, e.Name()+"="+l)
	}
	return s
}

// tempFile returns a file holding data, open for reading.
func tempFile(t testing.TB, data []byte) *os.File {
	name := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
