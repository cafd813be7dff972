package udp

// Tests of the batch writes: GSO fallbacks and per-message metadata.

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestEIOFallbackThroughTheKernel injects EIO for the first GSO send of a
// real WriteBatch (as a device without checksum offload would answer,
// wireguard-go conn/errors_linux.go) and checks, at the receiving socket,
// that every datagram arrived once and in order, unsegmented from then on,
// whether the runs went out with an iovec per datagram or one per run.
func TestEIOFallbackThroughTheKernel(t *testing.T) {
	t.Run("bufs=apart", func(t *testing.T) { testEIOFallback(t, makeMsgs(40, 300)) })
	t.Run("bufs=carved", func(t *testing.T) { testEIOFallback(t, carveMsgs(40, 300)) })
}

func testEIOFallback(t *testing.T, out []Message) {
	a, b := pair(t, "udp4", "127.0.0.1", &Options{DisableGRO: true, ReadBuffer: bigBuf})
	needGSO(t, a)
	out[0].Buf = out[0].Buf[:17] // a plain send before the first GSO run
	for i := range out {
		out[i].Buf[0] = byte(i)
		out[i].Addr = addrOf(b)
	}
	out[1].Buf = out[1].Buf[:250] // ends the first run: 0 alone, 1 alone, then 2..39
	s := writePool.Get().(*writeScratch)
	s.c = a
	injected := false
	hook := func(msgs []Message, gs []group) (int, error) {
		for i, g := range gs {
			if g.seg > 0 && !injected {
				injected = true
				if i > 0 {
					if n, err := s.send(msgs, gs[:i]); n < i || err != nil {
						return n, err
					}
				}
				return i, syscall.EIO
			}
		}
		return s.send(msgs, gs)
	}
	n, fellBack, err := writeGroups(out, &a.gso, &s.groups, hook)
	if err != nil || !fellBack || n != len(out) || !injected {
		t.Fatalf("n=%d fellBack=%v injected=%v err=%v", n, fellBack, injected, err)
	}
	if a.Stats().GSO {
		t.Fatal("GSO still on after EIO")
	}
	in := makeMsgs(len(out), 1500)
	readN(t, b, in, len(out), len(out))
	for i := range out {
		if !bytes.Equal(in[i].Payload(), out[i].Buf) {
			t.Fatalf("datagram %d: got %d bytes [%d], want %d [%d]", i, in[i].N, in[i].Buf[0], len(out[i].Buf), i)
		}
	}
	b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if k, err := b.ReadBatch(in); k != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a duplicate arrived: %d, %v", k, err)
	}
}

// TestGSOAbovePathMTUFallsBack runs in a network namespace of its own whose
// loopback has a 1500-byte MTU: a GSO send of 3000-byte datagrams is
// refused with EINVAL (udp_send_skb: segment above the MTU), and
// WriteBatch resends them unsegmented, as IP fragments that arrive whole.
func TestGSOAbovePathMTUFallsBack(t *testing.T) {
	if !kernelGSO() {
		t.Skip("kernel without UDP GSO (UDP_SEGMENT)")
	}
	done := make(chan struct{})
	var skip string // set when the kernel lacks what the test needs
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with its netns
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			skip = fmt.Sprintf("no network namespace of our own: unshare(CLONE_NEWNET): %v", err)
			return
		}
		if err := setLoopback(1500); err != nil {
			t.Errorf("configuring lo: %v", err)
			return
		}
		// Not pair: a helper that can Skip or Fatal must run on the
		// test's goroutine.
		opts := &Options{ReadBuffer: bigBuf}
		a, err := Listen("udp4", "127.0.0.1:0", opts)
		if err != nil {
			t.Error(err)
			return
		}
		defer a.Close()
		b, err := Listen("udp4", "127.0.0.1:0", opts)
		if err != nil {
			t.Error(err)
			return
		}
		defer b.Close()
		if !a.Stats().GSO {
			t.Errorf("GSO off on a kernel that has it: %+v", a.Stats())
			return
		}
		out := makeMsgs(10, 3000)
		for i := range out {
			out[i].Buf[0] = byte(i)
			out[i].Addr = addrOf(b)
		}
		if n, err := a.WriteAll(out); err != nil || n != len(out) {
			t.Errorf("WriteAll = %d, %v", n, err)
			return
		}
		in := makeMsgs(10, 4000)
		b.SetReadDeadline(time.Now().Add(5 * time.Second))
		for got := 0; got < len(in); {
			k, err := b.ReadBatch(in[got:])
			if err != nil {
				t.Errorf("read after %d of %d: %v", got, len(in), err)
				return
			}
			got += k
		}
		for i := range in {
			if in[i].N != 3000 || in[i].Buf[0] != byte(i) {
				t.Errorf("datagram %d: %d bytes [%d]", i, in[i].N, in[i].Buf[0])
			}
		}
		if st := a.Stats(); !st.GSO || st.GSOFallbacks != 0 {
			t.Errorf("an MTU refusal turned GSO off: %+v", st)
		}
	}()
	<-done
	if skip != "" {
		t.Skip(skip)
	}
}

// setLoopback brings lo up with the given MTU in the calling thread's
// network namespace.
func setLoopback(mtu uint32) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	ifr.SetUint32(mtu)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFMTU, ifr); err != nil {
		return err
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// TestWriteBatchRandomMetadata writes random batches that mix two
// destinations, source addresses, TOS values and sizes, so that GSO runs
// break on every field, and checks at both receivers that each datagram
// arrived once, in order, from the address it asked to be sent from, with
// its TOS. The Bufs of a batch are cut from one array, mostly back to back
// (runs go out as one iovec) and sometimes with a gap between two, which
// ends the single iovec, not the run.
func TestWriteBatchRandomMetadata(t *testing.T) {
	for _, off := range offloads[:2] {
		t.Run(off.name, func(t *testing.T) {
			opts := off.opts
			opts.PacketInfo, opts.ECN = true, true
			srv, err := Listen("udp4", "0.0.0.0:0", &opts) // sends from 127.0.0.x
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			r1, r2 := pair(t, "udp4", "127.0.0.1", &opts)
			rx := []*Conn{r1, r2}
			srcs := []netip.Addr{{}, netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.5")}
			rng := rand.New(rand.NewPCG(1, 2))
			var want [2][]Message
			for range 20 {
				out := make([]Message, 1+rng.IntN(100))
				arr, off := make([]byte, len(out)*1201), 0
				for i := range out {
					d := rng.IntN(2)
					if rng.IntN(4) != 0 && i > 0 { // mostly runs to one place
						d = int(out[i-1].TOS) & 1
					}
					size := []int{1200, 1200, 1200, 700, 1}[rng.IntN(5)]
					off += rng.IntN(8) / 7 // a gap of one byte, now and then
					m := Message{Buf: arr[off : off+size : off+size], Addr: addrOf(rx[d]), Local: srcs[rng.IntN(3)], TOS: uint8(d | rng.IntN(2)<<2)}
					off += size
					for j := range m.Buf {
						m.Buf[j] = byte(len(want[d]) + j)
					}
					out[i] = m
					want[d] = append(want[d], m)
				}
				if _, err := srv.WriteAll(out); err != nil {
					t.Fatal(err)
				}
			}
			for d, r := range rx {
				in := makeMsgs(len(want[d]), 1500)
				readN(t, r, in, len(want[d]), 64)
				for i, w := range want[d] {
					m := &in[i]
					from := w.Local
					if !from.IsValid() {
						from = netip.MustParseAddr("127.0.0.1") // the route's source
					}
					if !bytes.Equal(m.Payload(), w.Buf) || m.TOS != w.TOS || m.Addr.Addr() != from || m.Addr.Port() != srv.AddrPort().Port() {
						t.Fatalf("receiver %d datagram %d: %d bytes [%d] TOS %d from %v; want %d [%d] TOS %d from %v",
							d, i, m.N, m.Buf[0], m.TOS, m.Addr, len(w.Buf), w.Buf[0], w.TOS, from)
					}
				}
			}
		})
	}
}

// FuzzSetIovs cuts the Bufs of a batch from one array, back to back with
// now and then a gap, plans the sends, and checks that the iovecs of each
// send, one per datagram or one per run, cover exactly the run's bytes, in
// order.
func FuzzSetIovs(f *testing.F) {
	f.Add([]byte{100, 100, 100, 40}, []byte{0, 0, 0, 0})
	f.Add([]byte{200, 200, 200, 200}, []byte{0, 1, 0, 0})
	f.Add([]byte{1, 1, 0, 1}, []byte{0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, sizes, gaps []byte) {
		if len(sizes) > 300 {
			sizes = sizes[:300]
		}
		arr := make([]byte, len(sizes)*(255*7+1))
		for i := range arr {
			arr[i] = byte(i * 7)
		}
		msgs := make([]Message, len(sizes))
		off := 0
		for i, sz := range sizes {
			if len(gaps) > 0 && gaps[i%len(gaps)]&1 != 0 {
				off++
			}
			n := int(sz) * 7
			msgs[i] = Message{Buf: arr[off : off+n : off+n], Addr: apA}
			off += n
		}
		s := &writeScratch{}
		s.iovs = make([]unix.Iovec, len(msgs))
		for _, g := range planGroups(nil, msgs, true) {
			n := s.setIovs(msgs, g)
			if g.seg == 0 && n != 1 || n != 1 && n != g.end-g.start {
				t.Fatalf("group %+v: %d iovecs", g, n)
			}
			var got, want []byte
			for _, v := range s.iovs[g.start : g.start+n] {
				if v.Len > 0 {
					got = append(got, unsafe.Slice(v.Base, v.Len)...)
				}
			}
			for _, m := range msgs[g.start:g.end] {
				want = append(want, m.Buf...)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("group %+v: iovecs cover %d bytes, want the run's %d", g, len(got), len(want))
			}
		}
	})
}
