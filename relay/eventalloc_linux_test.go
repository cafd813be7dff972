package relay

import (
	"net"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/percpu"
	"golang.org/x/sys/unix"
)

// TestEventRelayAllocs checks that the event engine relays a connection,
// from accept to close, without allocating once warm: a request and its
// answer each way, then the client's close and the target's. The client
// and the target make raw system calls on blocking sockets, which
// allocate nothing, so the count, which covers the whole process, is the
// relay's. With rate limits and a max duration set (far above what the
// test moves), each connection takes its client's buckets and paces its
// bytes, and still allocates nothing.
func TestEventRelayAllocs(t *testing.T) {
	if percpu.RaceEnabled {
		t.Skip("the race detector allocates")
	}
	t.Run("limits=none", func(t *testing.T) { testEventRelayAllocs(t, func(*Route) {}) })
	t.Run("limits=all", func(t *testing.T) {
		testEventRelayAllocs(t, func(r *Route) {
			r.ConnRatePerClient = ConnRate{N: 1_000_000, Per: time.Second}
			r.UploadRate, r.DownloadRate = 1<<30, 1<<30
			r.ClientUploadRate, r.ClientDownloadRate = 1<<30, 1<<30
			r.MaxDuration = time.Hour
		})
	})
}

func testEventRelayAllocs(t *testing.T, mod func(*Route)) {
	lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(lfd)
	if err := unix.Bind(lfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(lfd, 128); err != nil {
		t.Fatal(err)
	}
	bsa, err := unix.Getsockname(lfd)
	if err != nil {
		t.Fatal(err)
	}
	target := (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: bsa.(*unix.SockaddrInet4).Port}).String()
	s := startRelay(t, route0("127.0.0.1:0", mustAddr(t, "tcp://"+target), mod))
	if _, ok := s.eng.(*eventEngine); !ok {
		t.Skip("the event engine is not the default")
	}
	rsa := &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: s.Addrs("r")[0].(*net.TCPAddr).Port}
	var failed unix.Errno
	fail := func(e error) {
		if e != nil && failed == 0 {
			failed = e.(unix.Errno)
		}
	}
	buf := make([]byte, 64)
	one := func() {
		cfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			fail(err)
			return
		}
		fail(unix.Connect(cfd, rsa))
		_, err = unix.Write(cfd, []byte("request"))
		fail(err)
		r, _, e := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(lfd), 0, 0, unix.SOCK_CLOEXEC, 0, 0)
		if e != 0 {
			fail(e)
			unix.Close(cfd)
			return
		}
		bfd := int(r)
		_, err = unix.Read(bfd, buf)
		fail(err)
		_, err = unix.Write(bfd, []byte("answer"))
		fail(err)
		_, err = unix.Read(cfd, buf)
		fail(err)
		unix.Close(cfd)
		for { // to the client's FIN, passed on
			n, err := unix.Read(bfd, buf)
			if n <= 0 || err != nil {
				break
			}
		}
		unix.Close(bfd)
	}
	for range 300 { // the slab, the pools and the runtime settle
		one()
	}
	if allocs := testing.AllocsPerRun(1000, one); allocs != 0 {
		t.Errorf("%v allocations per relayed connection, want 0", allocs)
	}
	if failed != 0 {
		t.Fatal(failed)
	}
	waitFor(t, func() bool { return s.Stats().Active == 0 })
	if st := s.Stats().Routes[0]; st.RateLimited != 0 {
		t.Fatalf("%d connections over a rate of a million a second", st.RateLimited)
	}
}
