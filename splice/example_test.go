package splice_test

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/zeroio/zeroio/splice"
)

// Copy is a drop-in for io.Copy; here it sends a file to a TCP peer.
func ExampleCopy() {
	name := filepath.Join(os.TempDir(), "splice-example.txt")
	os.WriteFile(name, []byte("hello, kernel\n"), 0o600)
	defer os.Remove(name)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		defer c.Close()
		f, _ := os.Open(name)
		defer f.Close()
		splice.Copy(c, f) // sendfile(2) on Linux
	}()
	c, err := ln.Accept()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	var b strings.Builder
	n, err := splice.Copy(&b, c) // no descriptor on dst: a pooled buffer
	fmt.Print(n, " ", err, " ", b.String())
	// Output: 14 <nil> hello, kernel
}

// A Copier with Progress keeps an idle timeout honest while the kernel
// moves the bytes: each chunk pushes the read deadline back.
func ExampleCopier_Progress() {
	src, dst := net.Pipe() // no descriptors here; a TCP pair would splice
	go func() {
		dst.Write([]byte("some bytes"))
		// ...then nothing: the copy gives up after 50ms of silence.
	}()
	const idle = 50 * time.Millisecond
	var total int64
	c := splice.Copier{Progress: func(n int64) {
		total += n
		src.SetReadDeadline(time.Now().Add(idle))
	}}
	src.SetReadDeadline(time.Now().Add(idle))
	n, err := c.Copy(io.Discard, src)
	fmt.Println(n, total, os.IsTimeout(err))
	// Output: 10 10 true
}

// countingConn is a wrapper a relay might use: its bytes pass unchanged,
// so it offers the conn underneath and copies through it still splice.
type countingConn struct {
	*net.TCPConn
	moved int64
}

func (c *countingConn) UnwrapConn() any { return c.TCPConn }

func ExampleUnwrapper() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			c.Write([]byte("through the wrapper"))
			c.Close()
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	src := &countingConn{TCPConn: c.(*net.TCPConn)}
	r, w, _ := os.Pipe()
	defer r.Close()
	cp := splice.Copier{Progress: func(n int64) { src.moved += n }} // counts live
	n, err := cp.Copy(w, src)                                       // splice(2): TCP -> pipe
	w.Close()
	got, _ := io.ReadAll(r)
	fmt.Println(n, err, src.moved, string(got))
	// Output: 19 <nil> 19 through the wrapper
}

// ReadStats tells which path copies took.
func ExampleReadStats() {
	before := splice.ReadStats()
	splice.Copy(io.Discard, strings.NewReader("abc"))
	after := splice.ReadStats()
	fmt.Println(after.BufferCopies-before.BufferCopies, after.BufferBytes-before.BufferBytes)
	// Output: 1 3
}
