package splice

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// xorConn changes every byte it reads: it embeds *net.TCPConn, so it has
// SyscallConn, but splicing its descriptor would skip the XOR.
type xorConn struct{ *net.TCPConn }

func (c xorConn) Read(b []byte) (int, error) {
	n, err := c.TCPConn.Read(b)
	for i := range b[:n] {
		b[i] ^= 0x5a
	}
	return n, err
}

// countConn passes bytes unchanged and says so with UnwrapConn.
type countConn struct {
	*net.TCPConn
	held bool // pretend bytes are buffered: refuse to unwrap
}

func (c *countConn) UnwrapConn() any {
	if c.held {
		return nil
	}
	return c.TCPConn
}

// rawOnly exposes only Read and SyscallConn: an unknown syscall.Conn type.
type rawOnly struct{ c *net.UnixConn }

func (r rawOnly) Read(b []byte) (int, error)            { return r.c.Read(b) }
func (r rawOnly) SyscallConn() (syscall.RawConn, error) { return r.c.SyscallConn() }

// selfUnwrap unwraps to a rawOnly, which is only trusted because of that.
type selfUnwrap struct{ rawOnly }

func (s selfUnwrap) UnwrapConn() any { return s.rawOnly }

func TestWrappers(t *testing.T) {
	data := payload(500_000, 11)
	t.Run("embedding-is-not-trusted", func(t *testing.T) {
		a, b := tcpPair(t)
		done := feed(b, data)
		dst := ends[1].dst(t)
		n, err := Copy(dst.dst, xorConn{a})
		done()
		if err != nil || n != int64(len(data)) {
			t.Fatalf("Copy = %d, %v", n, err)
		}
		got := dst.result()
		for i := range got {
			got[i] ^= 0x5a
		}
		if !bytes.Equal(got, data) {
			t.Fatal("bytes bypassed the wrapper's Read")
		}
	})
	for _, held := range []bool{false, true} {
		t.Run("unwrapper/held="+map[bool]string{false: "no", true: "yes"}[held], func(t *testing.T) {
			a, b := tcpPair(t)
			done := feed(b, data)
			dst := ends[1].dst(t)
			n, err := Copy(dst.dst, &countConn{TCPConn: a, held: held})
			done()
			if err != nil || n != int64(len(data)) {
				t.Fatalf("Copy = %d, %v", n, err)
			}
			if !bytes.Equal(dst.result(), data) {
				t.Fatal("content differs")
			}
		})
	}
	t.Run("unwrapper-to-unknown-syscall-conn", func(t *testing.T) {
		a, b := unixPair(t)
		done := feed(b, data)
		dst := ends[0].dst(t)
		n, err := Copy(dst.dst, selfUnwrap{rawOnly{a}})
		done()
		if err != nil || n != int64(len(data)) {
			t.Fatalf("Copy = %d, %v", n, err)
		}
		if !bytes.Equal(dst.result(), data) {
			t.Fatal("content differs")
		}
	})
}

func TestReaderWriterFallbacks(t *testing.T) {
	data := payload(300_000, 12)
	t.Run("bytes.Reader", func(t *testing.T) {
		dst := ends[0].dst(t)
		n, err := Copy(dst.dst, bytes.NewReader(data))
		if err != nil || n != int64(len(data)) || !bytes.Equal(dst.result(), data) {
			t.Fatalf("Copy = %d, %v", n, err)
		}
	})
	t.Run("to-bytes.Buffer", func(t *testing.T) {
		a, b := tcpPair(t)
		done := feed(b, data)
		var buf bytes.Buffer
		n, err := Copy(&buf, a)
		done()
		if err != nil || n != int64(len(data)) || !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("Copy = %d, %v", n, err)
		}
	})
	t.Run("tls", func(t *testing.T) {
		srv, cli := tlsPair(t)
		done := feed(srv, data)
		dst := ends[1].dst(t)
		n, err := Copy(dst.dst, cli)
		done()
		if err != nil || n != int64(len(data)) || !bytes.Equal(dst.result(), data) {
			t.Fatalf("Copy = %d, %v", n, err)
		}
	})
	t.Run("limited-reader", func(t *testing.T) {
		a, b := tcpPair(t)
		done := feed(b, data)
		dst := ends[1].dst(t)
		lr := &io.LimitedReader{R: a, N: 1000}
		n, err := Copy(dst.dst, lr)
		if err != nil || n != 1000 || lr.N != 0 {
			t.Fatalf("Copy = %d, %v, N = %d", n, err, lr.N)
		}
		rest, _ := io.ReadAll(a)
		done()
		if !bytes.Equal(dst.result(), data[:1000]) || !bytes.Equal(rest, data[1000:]) {
			t.Fatal("content differs")
		}
	})
}

// TestCopyNLikeStdlib compares results with io.CopyN on in-memory ends.
func TestCopyNLikeStdlib(t *testing.T) {
	for _, n := range []int64{-1, 0, 1, 5, 11, 12, 100} {
		var a, b bytes.Buffer
		wa, ea := io.CopyN(&a, strings.NewReader("hello world"), n)
		wb, eb := CopyN(&b, strings.NewReader("hello world"), n)
		if wa != wb || ea != eb || a.String() != b.String() {
			t.Errorf("n=%d: io.CopyN %d %v %q, CopyN %d %v %q", n, wa, ea, a.String(), wb, eb, b.String())
		}
	}
	if n, err := (&Copier{Limit: -1}).Copy(io.Discard, strings.NewReader("x")); n != 0 || err != nil {
		t.Errorf("negative Limit: %d, %v", n, err)
	}
}

type errWriter struct{ n int }

func (w *errWriter) Write(b []byte) (int, error) {
	if len(b) > w.n {
		n := w.n
		w.n = 0
		return n, errors.New("disk full")
	}
	w.n -= len(b)
	return len(b), nil
}

// TestShortWrite: a failing Write reports exactly what it took.
func TestShortWrite(t *testing.T) {
	a, b := tcpPair(t)
	go b.Write(payload(1<<20, 13))
	n, err := Copy(&errWriter{n: 70_000}, a)
	if n != 70_000 || err == nil || err.Error() != "disk full" {
		t.Fatalf("Copy = %d, %v", n, err)
	}
}

// TestProgressIdleTimeout: Progress sums to the count, and extending a
// read deadline from it makes an idle timeout during a splice.
func TestProgressIdleTimeout(t *testing.T) {
	src, feed := tcpPair(t)
	dst, far := unixPair(t)
	go io.Copy(io.Discard, far)
	chunk := payload(256<<10, 14)
	go func() {
		for range 5 {
			feed.Write(chunk)
			time.Sleep(30 * time.Millisecond) // busy, within the timeout
		}
		// then idle: the copy must time out
	}()
	var total int64
	var calls int
	const idle = time.Second // well above the 30ms gaps, even under -race on a loaded machine
	c := Copier{Progress: func(n int64) {
		total += n
		calls++
		src.SetReadDeadline(time.Now().Add(idle))
	}}
	src.SetReadDeadline(time.Now().Add(idle))
	start := time.Now()
	n, err := c.Copy(dst, src)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Copy = %d, %v; want a deadline error", n, err)
	}
	if n != 5*int64(len(chunk)) || total != n || calls == 0 {
		t.Fatalf("Copy = %d, progress total %d in %d calls", n, total, calls)
	}
	if time.Since(start) < idle {
		t.Fatal("timed out before the idle period")
	}
}

// tlsPair returns the server and client ends of a TLS session on
// loopback, with a certificate made for the test.
func tlsPair(t testing.TB) (srv, cli *tls.Conn) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	pool := x509.NewCertPool()
	leaf, _ := x509.ParseCertificate(der)
	pool.AddCert(leaf)
	a, b := tcpPair(t)
	srv = tls.Server(a, &tls.Config{Certificates: []tls.Certificate{cert}})
	cli = tls.Client(b, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	errc := make(chan error, 1)
	go func() { errc <- srv.Handshake() }()
	if err := cli.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return srv, cli
}
