package nbsys

import (
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/sockaddr"
	"golang.org/x/sys/unix"
)

// TestStreamCalls connects a socket of StreamSocket to a loopback
// listener without blocking (EINPROGRESS, then SO_ERROR 0), accepts it
// with Accept4, finds each end's address from the other's, and passes
// bytes sent with MSG_MORE and a half-close; a connect to a port nobody
// listens on leaves ECONNREFUSED in SO_ERROR.
func TestStreamCalls(t *testing.T) {
	ln := listen(t)
	lsa := sockaddr.FromAddrPort(LocalAddr(ln))
	c, e := StreamSocket(unix.AF_INET)
	if e != 0 {
		t.Fatal(e)
	}
	defer Close(c)
	if e := Connect(c, &lsa); e != 0 && e != unix.EINPROGRESS {
		t.Fatalf("connect: %v", e)
	}
	var raw unix.RawSockaddrAny
	var a int
	poll(t, "accept", func() bool {
		a, e = Accept4(ln, &raw)
		if e != 0 && e != unix.EAGAIN {
			t.Fatalf("accept4: %v", e)
		}
		return e == 0
	})
	defer Close(a)
	if e := SoError(c); e != 0 {
		t.Fatalf("SO_ERROR after connecting: %v", e)
	}
	if got, want := sockaddr.Parse(&raw), LocalAddr(c); got != want || PeerAddr(a) != want {
		t.Fatalf("peer %v (getpeername %v), client's own %v", got, PeerAddr(a), want)
	}
	if e := SetsockoptInt(c, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); e != 0 {
		t.Fatalf("setsockopt: %v", e)
	}
	if n, e := SendMore(c, []byte("last")); n != 4 || e != 0 {
		t.Fatalf("send: %d, %v", n, e)
	}
	if e := ShutdownWrite(c); e != 0 {
		t.Fatalf("shutdown: %v", e)
	}
	var got []byte
	buf := make([]byte, 16)
	poll(t, "the end of the stream", func() bool {
		n, e := Read(a, buf)
		if e != 0 && e != unix.EAGAIN {
			t.Fatalf("read: %v", e)
		}
		got = append(got, buf[:n]...)
		return e == 0 && n == 0
	})
	if string(got) != "last" {
		t.Fatalf("read %q", got)
	}

	Close(ln)
	r, e := StreamSocket(unix.AF_INET)
	if e != 0 {
		t.Fatal(e)
	}
	defer Close(r)
	switch e := Connect(r, &lsa); e {
	case unix.ECONNREFUSED: // refused at once
	case unix.EINPROGRESS:
		poll(t, "refusal", func() bool {
			switch e := SoError(r); e {
			case unix.ECONNREFUSED:
				return true
			case 0:
				return false
			default:
				t.Fatalf("SO_ERROR %v, want ECONNREFUSED", e)
			}
			return false
		})
	default:
		t.Fatalf("connect to a closed port: %v", e)
	}
}

// listen opens a non-blocking TCP listener on 127.0.0.1.
func listen(t *testing.T) int {
	t.Helper()
	fd, e := StreamSocket(unix.AF_INET)
	if e != 0 {
		t.Fatal(e)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		Close(fd)
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 8); err != nil {
		Close(fd)
		t.Fatal(err)
	}
	return fd
}

// poll calls f until it reports true, for up to ten seconds.
func poll(t *testing.T, what string, f func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !f(); {
		if time.Now().After(end) {
			t.Fatalf("no %s in 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
