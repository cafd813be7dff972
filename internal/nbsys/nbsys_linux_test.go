package nbsys

import (
	"bytes"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRead reads a real non-blocking UDP socket of package net: EAGAIN when
// it is empty (never blocking), each datagram whole, and a zero-length
// read without a buffer.
func TestRead(t *testing.T) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fd := fdOf(t, c)
	read := func(p []byte) (int, unix.Errno) { return Read(fd, p) }
	buf := make([]byte, 64)
	if _, e := read(buf); e != unix.EAGAIN {
		t.Fatalf("empty socket: errno %v, want EAGAIN", e)
	}
	s, err := net.DialUDP("udp4", nil, c.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, msg := range []string{"first", "second datagram"} {
		if _, err := s.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"first", "second datagram"} {
		n, e := read(buf)
		if e != 0 || string(buf[:n]) != want {
			t.Fatalf("got %q, errno %v; want %q", buf[:n], e, want)
		}
	}
	// A zero-length read of a socket returns 0 at once and leaves the
	// queue alone (sock_read_iter).
	s.Write([]byte("third"))
	if n, e := read(nil); e != 0 || n != 0 {
		t.Fatalf("zero-length read: %d, errno %v", n, e)
	}
	if n, e := read(buf); e != 0 || string(buf[:n]) != "third" {
		t.Fatalf("after a zero-length read: got %q, errno %v; want \"third\"", buf[:n], e)
	}
}

// TestSpliceWrite writes a real non-blocking TCP socket of package net
// until it is full (EAGAIN, never blocking), splices its peer's bytes into
// a pipe and from the pipe back to a socket, and finds every byte in order.
func TestSpliceWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	afd, bfd := fdOf(t, a.(*net.TCPConn)), fdOf(t, b.(*net.TCPConn))
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])

	if n, e := Splice(bfd, p[1], 1<<16, unix.SPLICE_F_NONBLOCK); e != unix.EAGAIN || n != 0 {
		t.Fatalf("splice of an empty socket: %d, errno %v; want EAGAIN", n, e)
	}
	chunk := make([]byte, 64<<10)
	var sent []byte
	for i := 0; ; i++ {
		for j := range chunk {
			chunk[j] = byte(i + j)
		}
		n, e := Write(afd, chunk)
		if e == unix.EAGAIN {
			break
		}
		if e != 0 || n <= 0 {
			t.Fatalf("write: %d, errno %v", n, e)
		}
		sent = append(sent, chunk[:n]...)
		if len(sent) > 1<<30 {
			t.Fatal("the socket never filled")
		}
	}
	// b's bytes go through the pipe back to b's own peer, a.
	var got []byte
	buf := make([]byte, 64<<10)
	for len(got) < len(sent) {
		n, e := Splice(bfd, p[1], 1<<16, unix.SPLICE_F_NONBLOCK)
		if e != 0 || n <= 0 {
			t.Fatalf("splice from the socket after %d of %d bytes: %d, errno %v", len(got), len(sent), n, e)
		}
		for n > 0 {
			m, e := Splice(p[0], bfd, n, unix.SPLICE_F_NONBLOCK)
			if e != 0 || m <= 0 {
				t.Fatalf("splice to the socket: %d, errno %v", m, e)
			}
			n -= m
			for m > 0 {
				a.SetReadDeadline(time.Now().Add(10 * time.Second))
				r, err := a.Read(buf[:min(m, len(buf))])
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, buf[:r]...)
				m -= r
			}
		}
	}
	if !bytes.Equal(got, sent) {
		t.Fatal("the bytes differ")
	}
	if n, e := Write(afd, nil); e != 0 || n != 0 {
		t.Fatalf("zero-length write: %d, errno %v", n, e)
	}
}

// fdOf returns c's descriptor, which stays open as long as c does.
func fdOf(t *testing.T, c syscall.Conn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}
