package nbsys

import (
	"net"
	"testing"

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
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	read := func(p []byte) (n int, e unix.Errno) {
		rc.Control(func(fd uintptr) { n, e = Read(fd, p) })
		return n, e
	}
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
