package bench

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// relayStreamsCases: many concurrent streams through the relay to an echo
// backend, each sending its own random bytes and checking the SHA-256 of
// what comes back after the half-close. One op moves every stream; any
// lost or corrupted byte fails the benchmark.
func relayStreamsCases(sc Scale) []Case {
	n := 1000
	if sc == Quick {
		n = 200
	}
	var cs []Case
	for _, impl := range []string{"zeroio", "iocopy"} {
		cs = append(cs, Case{fmt.Sprintf("streams=%d/size=65536/impl=%s", n, impl), func(b *testing.B) {
			runRelayStreams(b, impl, n, 64<<10)
		}})
	}
	return cs
}

func runRelayStreams(b *testing.B, impl string, n, size int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal(b, err)
	}
	defer ln.Close()
	go serveConns(ln, func(c net.Conn) {
		io.Copy(c, c)
		c.(*net.TCPConn).CloseWrite()
	})
	p, err := startRelayProc(impl, "tcp://"+ln.Addr().String())
	if err != nil {
		fatal(b, err)
	}
	defer p.stop()
	data := make([][]byte, n)
	sums := make([][32]byte, n)
	for i := range data {
		data[i] = make([]byte, size)
		rand.NewChaCha8([32]byte{byte(i), byte(i >> 8)}).Read(data[i])
		sums[i] = sha256.Sum256(data[i])
	}
	b.ReportAllocs()
	b.SetBytes(int64(2 * n * size))
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.Dial("tcp", p.addr)
				if err != nil {
					errs <- err
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(60 * time.Second))
				go func() {
					c.Write(data[i])
					c.(*net.TCPConn).CloseWrite()
				}()
				h := sha256.New()
				m, err := io.Copy(h, c)
				if err != nil || m != int64(size) || !bytes.Equal(h.Sum(nil), sums[i][:]) {
					errs <- fmt.Errorf("stream %d: %d of %d bytes back, err %v, hash ok %v", i, m, size, err, bytes.Equal(h.Sum(nil), sums[i][:]))
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			fatal(b, err)
		}
	}
}
