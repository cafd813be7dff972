package udp

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/percpu"
)

// bigBuf is enough socket buffer for the largest test batch on loopback.
const bigBuf = 8 << 20

type offload struct {
	name string
	opts Options
}

var offloads = []offload{
	{"offload=none", Options{DisableGSO: true, DisableGRO: true, ReadBuffer: bigBuf, WriteBuffer: bigBuf}},
	{"offload=gso-gro", Options{ReadBuffer: bigBuf, WriteBuffer: bigBuf}},
	{"offload=gso", Options{DisableGRO: true, ReadBuffer: bigBuf, WriteBuffer: bigBuf}},
}

// pair opens two Conns on loopback addr ("127.0.0.1" or "::1") and makes
// a first read on each, which turns GRO on where opts allow it, so that
// datagrams sent next may arrive coalesced. It skips only when package net
// cannot open such a socket here (no IPv6); zeroio's own errors fail.
func pair(t testing.TB, network, addr string, opts *Options) (a, b *Conn) {
	t.Helper()
	needListen(t, network, addr)
	a, err := Listen(network, net.JoinHostPort(addr, "0"), opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err = Listen(network, net.JoinHostPort(addr, "0"), opts)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	firstRead(t, a)
	firstRead(t, b)
	return a, b
}

// needListen skips the test when package net cannot open a UDP socket on
// addr here: a host without IPv6, or without dual-stack sockets.
func needListen(t testing.TB, network, addr string) {
	t.Helper()
	pc, err := net.ListenPacket(network, net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Skipf("no %s socket on %s here: %v", network, addr, err)
	}
	pc.Close()
}

// firstRead makes c's first read, which finds its deadline passed and
// returns without a datagram; on Linux it turns GRO on unless c's Options
// turn it off.
func firstRead(t testing.TB, c *Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(-time.Second))
	n, err := c.ReadBatch(make([]Message, 1))
	c.SetReadDeadline(time.Time{})
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("first read with its deadline passed: %d, %v", n, err)
	}
}

func addrOf(c *Conn) netip.AddrPort { return c.AddrPort() }

func makeMsgs(n, size int) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i].Buf = make([]byte, size)
	}
	return msgs
}

// carveMsgs is makeMsgs with the Bufs cut back to back from one array, as
// a sender filling one large buffer has them.
func carveMsgs(n, size int) []Message {
	msgs := make([]Message, n)
	arr := make([]byte, n*size)
	for i := range msgs {
		msgs[i].Buf = arr[i*size : (i+1)*size : (i+1)*size]
	}
	return msgs
}

// readN reads exactly n datagrams into msgs (len(msgs) >= n), batch at a
// time, and fails on a timeout.
func readN(t testing.TB, c *Conn, msgs []Message, n, batch int) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	for got := 0; got < n; {
		k, err := c.ReadBatch(msgs[got:min(n, got+batch)])
		if err != nil {
			t.Fatalf("read after %d of %d: %v", got, n, err)
		}
		got += k
	}
}

func TestBatchLoopback(t *testing.T) {
	for _, fam := range []struct{ network, addr string }{{"udp4", "127.0.0.1"}, {"udp6", "::1"}} {
		for _, off := range offloads {
			for _, n := range []int{1, 2, 3, 7, 16, 64, 65, 200, 512} {
				t.Run(fmt.Sprintf("%s/%s/n=%d", fam.network, off.name, n), func(t *testing.T) {
					a, b := pair(t, fam.network, fam.addr, &off.opts)
					dst := addrOf(b)
					out := make([]Message, n)
					for i := range out {
						size := 1 + (i*37)%1200
						if i%5 != 4 { // runs of equal sizes, so GSO has work
							size = 1000
						}
						out[i].Buf = bytes.Repeat([]byte{byte(i)}, size)
						out[i].Buf[0] = byte(i >> 8)
						out[i].Addr = dst
					}
					if k, err := a.WriteAll(out); err != nil || k != n {
						t.Fatalf("WriteAll = %d, %v", k, err)
					}
					in := makeMsgs(n, 1500)
					readN(t, b, in, n, n)
					for i := range in {
						if !bytes.Equal(in[i].Payload(), out[i].Buf) || in[i].Truncated {
							t.Fatalf("datagram %d: got %d bytes (truncated %v), want %d", i, in[i].N, in[i].Truncated, len(out[i].Buf))
						}
						if in[i].Addr != addrOf(a) {
							t.Fatalf("datagram %d from %v, want %v", i, in[i].Addr, addrOf(a))
						}
					}
				})
			}
		}
	}
}

func TestTruncatedDatagramIsReported(t *testing.T) {
	for _, off := range offloads {
		t.Run(off.name, func(t *testing.T) {
			a, b := pair(t, "udp4", "127.0.0.1", &off.opts)
			// A batch of 1 takes recvfrom(2) when no control data is
			// asked for, a batch of 3 recvmmsg(2).
			for _, batch := range []int{1, 3} {
				out := []Message{
					{Buf: bytes.Repeat([]byte{1}, 100), Addr: addrOf(b)},
					{Buf: bytes.Repeat([]byte{2}, 100), Addr: addrOf(b)},
					{Buf: bytes.Repeat([]byte{3}, 5), Addr: addrOf(b)},
				}
				if _, err := a.WriteAll(out); err != nil {
					t.Fatal(err)
				}
				in := makeMsgs(3, 10)
				readN(t, b, in, 3, batch)
				for i, want := range []bool{true, true, false} {
					if in[i].Truncated != want || in[i].N != min(10, len(out[i].Buf)) || in[i].Addr != addrOf(a) {
						t.Fatalf("batch %d, datagram %d: N=%d truncated=%v from %v", batch, i, in[i].N, in[i].Truncated, in[i].Addr)
					}
				}
			}
		})
	}
}

func TestReadDeadline(t *testing.T) {
	_, b := pair(t, "udp4", "127.0.0.1", nil)
	b.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := b.ReadBatch(makeMsgs(4, 64))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("err = %v, want a timeout", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" {
		t.Fatalf("err = %#v, want *net.OpError read", err)
	}
}

func TestCloseWakesBlockedReader(t *testing.T) {
	for _, off := range offloads[:2] {
		t.Run(off.name, func(t *testing.T) {
			_, b := pair(t, "udp4", "127.0.0.1", &off.opts)
			done := make(chan error)
			go func() {
				_, err := b.ReadBatch(makeMsgs(8, 64))
				done <- err
			}()
			time.Sleep(20 * time.Millisecond)
			b.Close()
			select {
			case err := <-done:
				if !errors.Is(err, net.ErrClosed) {
					t.Fatalf("err = %v, want net.ErrClosed", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Close did not wake the reader")
			}
			if _, err := b.WriteBatch([]Message{{Buf: []byte("x"), Addr: addrOf(b)}}); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("write after close: %v", err)
			}
		})
	}
}

func TestWrongFamilyIsAnErrorNotAPanic(t *testing.T) {
	a, b := pair(t, "udp4", "127.0.0.1", nil)
	msgs := []Message{
		{Buf: []byte("ok"), Addr: addrOf(b)},
		{Buf: []byte("v6"), Addr: netip.MustParseAddrPort("[::1]:9")},
		{Buf: []byte("never"), Addr: addrOf(b)},
	}
	n, err := a.WriteBatch(msgs)
	if n != 1 || err == nil {
		t.Fatalf("WriteBatch = %d, %v; want 1 and an error", n, err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) {
		t.Fatalf("err %#v is not a net.OpError", err)
	}
	if runtime.GOOS != "linux" { // package net reports its own address error
		return
	}
	var se *os.SyscallError
	if !errors.As(err, &se) {
		t.Fatalf("err %#v does not wrap os.SyscallError in net.OpError", err)
	}
	in := makeMsgs(2, 64)
	readN(t, b, in, 1, 2)
	if string(in[0].Payload()) != "ok" {
		t.Fatalf("got %q", in[0].Payload())
	}
}

// TestDualStackReportsIPv4 sends from an IPv4 socket to a dual-stack one and
// back: the address comes out as IPv4, and an IPv4 destination works.
func TestDualStackReportsIPv4(t *testing.T) {
	needListen(t, "udp", "::")
	ds, err := Listen("udp", "[::]:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	v4, err := Listen("udp4", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v4.Close()
	to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), addrOf(ds).Port())
	if _, err := v4.WriteBatch([]Message{{Buf: []byte("hi"), Addr: to}}); err != nil {
		t.Fatal(err)
	}
	in := makeMsgs(1, 64)
	readN(t, ds, in, 1, 1)
	if !in[0].Addr.Addr().Is4() || in[0].Addr != addrOf(v4) {
		t.Fatalf("source %v, want %v as IPv4", in[0].Addr, addrOf(v4))
	}
	if _, err := ds.WriteBatch([]Message{{Buf: []byte("back"), Addr: in[0].Addr}}); err != nil {
		t.Fatal(err)
	}
	readN(t, v4, in, 1, 1)
	if string(in[0].Payload()) != "back" || in[0].Addr != to {
		t.Fatalf("got %q from %v", in[0].Payload(), in[0].Addr)
	}
}

// TestConcurrentReadersAndWriters runs writers and readers on one Conn at
// once; under -race it checks the pooled scratch and the GRO leftovers.
func TestConcurrentReadersAndWriters(t *testing.T) {
	for _, off := range offloads[:2] {
		t.Run(off.name, func(t *testing.T) {
			a, b := pair(t, "udp4", "127.0.0.1", &off.opts)
			const writers, readers, batches, batch = 4, 2, 50, 16
			total := writers * batches * batch
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					msgs := makeMsgs(batch, 200)
					for range batches {
						for i := range msgs {
							msgs[i].Buf[0] = byte(w)
							msgs[i].Addr = addrOf(b)
						}
						if _, err := a.WriteAll(msgs); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			var mu sync.Mutex
			got := 0
			b.SetReadDeadline(time.Now().Add(10 * time.Second))
			var rg sync.WaitGroup
			for range readers {
				rg.Add(1)
				go func() {
					defer rg.Done()
					msgs := makeMsgs(batch, 1500)
					for {
						n, err := b.ReadBatch(msgs)
						mu.Lock()
						got += n
						done := got >= total
						mu.Unlock()
						for i := range msgs[:n] {
							if msgs[i].N != 200 || int(msgs[i].Buf[0]) >= writers {
								t.Errorf("bad datagram: %d bytes", msgs[i].N)
							}
						}
						if done || err != nil {
							if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
								t.Error(err)
							}
							b.SetReadDeadline(time.Now()) // wake the other reader
							return
						}
					}
				}()
			}
			wg.Wait()
			rg.Wait()
			if got < total*99/100 {
				t.Fatalf("received %d of %d", got, total)
			}
		})
	}
}

func TestAllocsPerRun(t *testing.T) {
	skipAllocCheck(t)
	type layout struct {
		name string
		make func(n, size int) []Message
	}
	for _, off := range offloads[:2] {
		for _, lay := range []layout{{"apart", makeMsgs}, {"carved", carveMsgs}} {
			for _, n := range []int{1, 8, 64, 512} {
				t.Run(fmt.Sprintf("%s/bufs=%s/n=%d", off.name, lay.name, n), func(t *testing.T) {
					allocsPerWriteRead(t, off.opts, lay.make(n, 64))
				})
			}
		}
	}
}

// allocsPerWriteRead fails if a WriteAll of out, with packet info and
// TOS, and the ReadBatch calls that read it back allocate.
func allocsPerWriteRead(t *testing.T, opts Options, out []Message) {
	t.Helper()
	n := len(out)
	opts.PacketInfo, opts.ECN = true, true
	a, b := pair(t, "udp6", "::1", &opts)
	for i := range out {
		out[i].Addr = addrOf(b)
		out[i].Local = netip.MustParseAddr("::1")
		out[i].TOS = 2
	}
	in := makeMsgs(n, 64)
	run := func() {
		if k, err := a.WriteAll(out); err != nil || k != n {
			t.Fatal(k, err)
		}
		for got := 0; got < n; {
			k, err := b.ReadBatch(in[got:])
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
	}
	run()
	if allocs := testing.AllocsPerRun(50, run); allocs != 0 {
		t.Fatalf("%v allocations per WriteAll+ReadBatch of %d", allocs, n)
	}
	if in[0].Addr != addrOf(a) || in[0].Local != netip.MustParseAddr("::1") || in[0].TOS&3 != 2 {
		t.Fatalf("metadata: %+v", in[0])
	}
}

func TestNoLeaks(t *testing.T) {
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			return -1
		}
		return len(ents)
	}
	// The first socket of the process starts the runtime's netpoller
	// (an epoll fd and an eventfd, kept for good): start it before
	// counting, so that the test counts only what Conns leave behind.
	a, b := pair(t, "udp4", "127.0.0.1", nil)
	a.Close()
	b.Close()
	g0, f0 := runtime.NumGoroutine(), fds()
	for range 20 {
		a, b := pair(t, "udp4", "127.0.0.1", nil)
		a.WriteAll([]Message{{Buf: []byte("x"), Addr: addrOf(b)}})
		readN(t, b, makeMsgs(1, 8), 1, 1)
		a.Close()
		b.Close()
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && (runtime.NumGoroutine() > g0 || fds() > f0) {
		time.Sleep(10 * time.Millisecond)
	}
	if g, f := runtime.NumGoroutine(), fds(); g > g0 || f > f0 {
		t.Fatalf("goroutines %d -> %d, fds %d -> %d", g0, g, f0, f)
	}
}

// skipAllocCheck skips an allocation count where it does not hold: under
// -race, where sync.Pool drops items on purpose, and off Linux, where zero
// allocations are not claimed.
func skipAllocCheck(t *testing.T) {
	t.Helper()
	if percpu.RaceEnabled {
		t.Skip("sync.Pool drops items on purpose under -race")
	}
	if runtime.GOOS != "linux" {
		t.Skip("zero allocations are a Linux claim")
	}
}
