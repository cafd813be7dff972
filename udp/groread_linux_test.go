package udp

// Tests of the GRO reads: splitting, order, allocations, control space.

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/udpsys"
	"golang.org/x/sys/unix"
)

// TestGROScatterKeepsOrderAcrossSegmentSizes drives the zero-copy GRO read
// through changes of segment size, single datagrams shorter and longer than
// the learned size, and batch sizes that cut coalesced reads: every
// datagram arrives once, in order, whole, and ReadBatch only ever exchanges
// the caller's own buffers.
func TestGROScatterKeepsOrderAcrossSegmentSizes(t *testing.T) {
	type phase struct{ count, size int }
	phases := []phase{{100, 1000}, {100, 500}, {1, 1200}, {1, 200}, {30, 1400}, {64, 1000}, {1, 1000}, {200, 300}, {47, 1400},
		{-150, 700}, {3, 1400}, {-5, 100}, {90, 64}} // negative: that many single datagrams, each its own send
	for _, tc := range []struct{ batch, bufSize int }{
		{1, 1500}, {7, 1500}, {63, 1500}, {64, 1500}, {65, 1500}, {200, 1500}, {512, 1500},
		{1, 65535}, {5, 65535}, {64, 65535}, {130, 65535},
	} {
		batch, bufSize := tc.batch, tc.bufSize
		t.Run(fmt.Sprintf("batch=%d/buf=%d", batch, bufSize), func(t *testing.T) {
			a, b := pair(t, "udp4", "127.0.0.1", &Options{ReadBuffer: bigBuf, WriteBuffer: bigBuf})
			needGRO(t, b)
			var want [][]byte
			for _, ph := range phases {
				if ph.count < 0 {
					for range -ph.count {
						p := make([]byte, ph.size)
						p[0], p[1] = byte(len(want)>>8), byte(len(want))
						want = append(want, p)
						if _, err := a.WriteBatch([]Message{{Buf: p, Addr: addrOf(b)}}); err != nil {
							t.Fatal(err)
						}
					}
					continue
				}
				out := make([]Message, ph.count)
				for i := range out {
					p := make([]byte, ph.size)
					p[0], p[1] = byte(len(want)>>8), byte(len(want))
					if i == ph.count-1 && ph.count > 1 {
						p = p[:ph.size/3+2] // a shorter last datagram
					}
					want = append(want, p)
					out[i] = Message{Buf: p, Addr: addrOf(b)}
				}
				if _, err := a.WriteAll(out); err != nil {
					t.Fatal(err)
				}
			}
			msgs := makeMsgs(batch, bufSize)
			owned := map[*byte]bool{}
			for i := range msgs {
				owned[&msgs[i].Buf[0]] = true
			}
			b.SetReadDeadline(time.Now().Add(5 * time.Second))
			got := 0
			for got < len(want) {
				n, err := b.ReadBatch(msgs)
				if err != nil {
					t.Fatalf("after %d of %d: %v", got, len(want), err)
				}
				for i := range msgs[:n] {
					w := want[got+i]
					if msgs[i].Truncated || !bytes.Equal(msgs[i].Payload(), w) {
						t.Fatalf("datagram %d: got %d bytes [%x] truncated=%v, want %d [%x]",
							got+i, msgs[i].N, msgs[i].Buf[:2], msgs[i].Truncated, len(w), w[:2])
					}
					if msgs[i].Addr != addrOf(a) {
						t.Fatalf("datagram %d from %v", got+i, msgs[i].Addr)
					}
				}
				seen := map[*byte]bool{}
				for i := range msgs {
					if len(msgs[i].Buf) != bufSize || !owned[&msgs[i].Buf[0]] || seen[&msgs[i].Buf[0]] {
						t.Fatal("ReadBatch changed the set of buffers")
					}
					seen[&msgs[i].Buf[0]] = true
				}
				got += n
			}
			if st := b.Stats(); st.GROReads == 0 {
				t.Fatalf("no coalesced reads: %+v", st)
			}
		})
	}
}

// TestAllocsPerRunGROPaths covers the GRO read paths the plain AllocsPerRun
// test does not reach: single datagrams into 64 KiB buffers (readBig) and
// coalesced ones into them.
func TestAllocsPerRunGROPaths(t *testing.T) {
	skipAllocCheck(t)
	for _, gso := range []bool{false, true} {
		t.Run(fmt.Sprint("gso=", gso), func(t *testing.T) {
			a, b := pair(t, "udp4", "127.0.0.1", &Options{DisableGSO: !gso, ReadBuffer: bigBuf, WriteBuffer: bigBuf})
			needGRO(t, b)
			const n = 64
			out := makeMsgs(n, 1200)
			for i := range out {
				out[i].Addr = addrOf(b)
			}
			in := makeMsgs(n, 65535)
			run := func() {
				if _, err := a.WriteAll(out); err != nil {
					t.Fatal(err)
				}
				for got := 0; got < n; {
					k, err := b.ReadBatch(in)
					if err != nil {
						t.Fatal(err)
					}
					got += k
				}
			}
			run()
			if allocs := testing.AllocsPerRun(50, run); allocs != 0 {
				t.Fatalf("%v allocations per round of %d", allocs, n)
			}
		})
	}
}

// TestReadBigSpillsOnlyWhatWaits reads a coalesced buffer of 64 datagrams
// followed by single ones into a batch of 256 64 KiB buffers (readBig): the
// 63 headers that do not fit wait in spill buffers, and a second round
// reuses the pooled ones. A readBig that took a spill buffer for every
// header of the call, 256 of them, more than the pool keeps, would
// allocate megabytes on every such read.
func TestReadBigSpillsOnlyWhatWaits(t *testing.T) {
	skipAllocCheck(t)
	a, b := pair(t, "udp4", "127.0.0.1", &Options{ReadBuffer: 64 << 20, WriteBuffer: bigBuf})
	needGSO(t, a)
	needGRO(t, b)
	const batch = 256
	coalesced := makeMsgs(64, 100)
	single := makeMsgs(batch, 100)
	for i := range coalesced {
		coalesced[i].Addr = addrOf(b)
	}
	for i := range single {
		single[i].Addr = addrOf(b)
		single[i].Buf = single[i].Buf[:50+i%2]
	}
	in := makeMsgs(batch, 65535)
	round := func() uint64 {
		if _, err := a.WriteAll(coalesced); err != nil { // one GSO send
			t.Fatal(err)
		}
		a.gso.Store(false) // then single datagrams
		_, err := a.WriteAll(single)
		a.gso.Store(true)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // all queued, so the first read fills the batch
		if b.sys.coalesced || len(b.sys.pending) > 0 {
			t.Fatal("the reader would not take readBig")
		}
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		n, err := b.ReadBatch(in)
		runtime.ReadMemStats(&ms1)
		if err != nil || n != batch {
			t.Fatalf("ReadBatch = %d, %v; want %d", n, err, batch)
		}
		readN(t, b, in, 64+batch-n, batch)
		b.sys.coalesced = false // the next round starts as after single datagrams
		return ms1.TotalAlloc - ms0.TotalAlloc
	}
	// The spill buffers come from sync.Pools: no collection between the
	// rounds, which would empty them, and one P, so the second round
	// cannot land on a P that does not see what the first one Put.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	round()
	if alloc := round(); alloc > 0 {
		t.Fatalf("a ReadBatch of %d into 64 KiB buffers allocated %d bytes (%d x 64 KiB)", batch, alloc, alloc>>16)
	}
}

// TestGROReadsCountsEachBufferOnce reads coalesced buffers of 64 datagrams
// ten at a time, so that each is delivered over several calls, through
// readBig (64 KiB buffers, first round), readScatter (later rounds) and the
// spill read (1500-byte buffers, first round): Stats.GROReads counts each
// buffer once. readBig and readScatter counted a buffer, and deliverSpill
// counted it again when it delivered the rest.
func TestGROReadsCountsEachBufferOnce(t *testing.T) {
	for _, bufSize := range []int{1500, 65535} {
		t.Run(fmt.Sprint("buf=", bufSize), func(t *testing.T) {
			a, b := pair(t, "udp4", "127.0.0.1", &Options{ReadBuffer: bigBuf, WriteBuffer: bigBuf})
			needGSO(t, a)
			needGRO(t, b)
			out := makeMsgs(64, 100)
			for i := range out {
				out[i].Addr = addrOf(b)
			}
			in := makeMsgs(64, bufSize)
			for round := uint64(1); round <= 3; round++ {
				if n, err := a.WriteBatch(out); n != len(out) || err != nil {
					t.Fatalf("WriteBatch = %d, %v", n, err)
				}
				if st := a.Stats(); st.GSOSends != round {
					t.Fatalf("round %d: not one GSO send: %+v", round, st)
				}
				readN(t, b, in, len(out), 10)
				if st := b.Stats(); st.GROReads != round {
					t.Fatalf("round %d: Stats().GROReads = %d", round, st.GROReads)
				}
			}
		})
	}
}

// TestControlBufferHoldsWhatOptionsEnable reads coalesced IPv4 and IPv6
// datagrams on a dual-stack socket with PacketInfo and ECN, the most
// control messages a Conn asks for: none is cut (no MSG_CTRUNC).
func TestControlBufferHoldsWhatOptionsEnable(t *testing.T) {
	needListen(t, "udp", "::")
	needListen(t, "udp6", "::1")
	rx, err := Listen("udp", "[::]:0", &Options{PacketInfo: true, ECN: true, ReadBuffer: bigBuf})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	for _, from := range []struct{ network, addr string }{{"udp4", "127.0.0.1"}, {"udp6", "::1"}} {
		tx, err := Listen(from.network, net.JoinHostPort(from.addr, "0"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		local := netip.MustParseAddr(from.addr)
		out := makeMsgs(4, 100)
		for i := range out {
			out[i].Addr = netip.AddrPortFrom(local, rx.AddrPort().Port())
			out[i].TOS = 2
		}
		if _, err := tx.WriteAll(out); err != nil {
			t.Fatal(err)
		}
		in := makeMsgs(4, 1500)
		readN(t, rx, in, 4, 4)
		for i := range in {
			if m := &in[i]; m.Flags&unix.MSG_CTRUNC != 0 || m.Local != local || m.TOS != 2 || m.N != 100 || m.Truncated {
				t.Fatalf("from %s, datagram %d: %+v", from.addr, i, *m)
			}
		}
	}
}

// TestGROSizeLostToControlTruncation shrinks the control buffer so that
// the kernel cuts the UDP_GRO message (MSG_CTRUNC), as control messages
// enabled through SyscallConn could: the spill read, readBig and
// readScatter each deliver the coalesced buffer as one Message marked
// Truncated with MSG_CTRUNC in Flags, never as one whole datagram.
func TestGROSizeLostToControlTruncation(t *testing.T) {
	space := udpsys.RecvSpace
	t.Cleanup(func() { udpsys.RecvSpace = space })
	for _, tc := range []struct {
		name    string
		bufSize int
		learn   bool // first read a coalesced buffer whole, so that readScatter knows the size
	}{{"spill", 1500, false}, {"readBig", 65535, false}, {"readScatter", 1500, true}} {
		t.Run(tc.name, func(t *testing.T) {
			udpsys.RecvSpace = space
			a, b := pair(t, "udp4", "127.0.0.1", &Options{ReadBuffer: bigBuf})
			needGSO(t, a)
			needGRO(t, b)
			out := makeMsgs(4, 100)
			for i := range out {
				out[i].Addr = addrOf(b)
				out[i].Buf[0] = byte(i)
			}
			in := makeMsgs(8, tc.bufSize)
			if tc.learn {
				if _, err := a.WriteBatch(out); err != nil {
					t.Fatal(err)
				}
				readN(t, b, in, 4, 8)
			}
			udpsys.RecvSpace = unix.SizeofCmsghdr // room for a cut header, no data
			if _, err := a.WriteBatch(out); err != nil {
				t.Fatal(err)
			}
			b.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := b.ReadBatch(in)
			if err != nil {
				t.Fatal(err)
			}
			if m := &in[0]; n != 1 || m.N != 400 || !m.Truncated || m.Flags&unix.MSG_CTRUNC == 0 || m.Buf[0] != 0 || m.Buf[100] != 1 {
				t.Fatalf("%d Messages, the first %d bytes, truncated %v, flags %#x", n, m.N, m.Truncated, m.Flags)
			}
		})
	}
}

// TestGROReadRandomTraffic sends random mixes of GSO runs and single
// datagrams and reads them with random batch and buffer sizes, on IPv4
// and IPv6: every datagram arrives once, in order, whole where it fits and
// marked Truncated where it does not.
func TestGROReadRandomTraffic(t *testing.T) {
	for _, fam := range []struct{ network, addr string }{{"udp4", "127.0.0.1"}, {"udp6", "::1"}} {
		for seed := range int64(8) {
			t.Run(fmt.Sprintf("%s/seed=%d", fam.network, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(seed), 7))
				a, b := pair(t, fam.network, fam.addr, &Options{ReadBuffer: bigBuf, WriteBuffer: bigBuf})
				needGRO(t, b)
				bufSize := []int{600, 1500, 65535}[rng.IntN(3)]
				var want [][]byte
				for range 25 {
					count := 1 + rng.IntN(80)
					size := 1 + rng.IntN(1400)
					out := make([]Message, count)
					for i := range out {
						p := make([]byte, size)
						if i == count-1 {
							p = p[:1+rng.IntN(size)]
						}
						if len(p) >= 2 {
							p[0], p[1] = byte(len(want)>>8), byte(len(want))
						}
						want = append(want, p)
						out[i] = Message{Buf: p, Addr: addrOf(b)}
					}
					if _, err := a.WriteAll(out); err != nil {
						t.Fatal(err)
					}
				}
				msgs := makeMsgs(1+rng.IntN(300), bufSize)
				b.SetReadDeadline(time.Now().Add(5 * time.Second))
				for got := 0; got < len(want); {
					n, err := b.ReadBatch(msgs[:1+rng.IntN(len(msgs))])
					if err != nil {
						t.Fatalf("after %d of %d: %v", got, len(want), err)
					}
					for i := range msgs[:n] {
						w, m := want[got+i], &msgs[i]
						fits := len(w) <= len(m.Buf)
						if m.Truncated == fits || !bytes.Equal(m.Payload(), w[:min(len(w), len(m.Buf))]) || m.Addr != addrOf(a) {
							t.Fatalf("datagram %d: got %d bytes (truncated %v) from %v, want %d", got+i, m.N, m.Truncated, m.Addr, len(w))
						}
					}
					got += n
				}
			})
		}
	}
}

// TestGROReadForeignSenders has three sockets of package net send GSO runs
// of their own (any size, up to 128 segments, which later kernels allow,
// the last segment possibly shorter, and empty datagrams between), and
// reads them with random batches into buffers of mixed sizes, with and
// without PacketInfo and ECN: every datagram arrives once, in order, from
// its sender, whole where it fits and marked Truncated where it does not.
func TestGROReadForeignSenders(t *testing.T) {
	for seed := range uint64(16) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			ctl := seed%2 == 0
			_, b := pair(t, "udp4", "127.0.0.1", &Options{ReadBuffer: bigBuf, WriteBuffer: bigBuf, PacketInfo: ctl, ECN: ctl})
			needGRO(t, b)
			var senders [3]*net.UDPConn
			for i := range senders {
				s, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				s.SetWriteBuffer(bigBuf)
				senders[i] = s
			}
			var want [][]byte
			var from []int
			for range 30 {
				seg := 2 + rng.IntN(1400)
				if rng.IntN(3) == 0 {
					seg = 2 + rng.IntN(40)
				}
				si := rng.IntN(len(senders))
				count := 1 + rng.IntN(min(128, maxGSOBytes/seg))
				var payload []byte
				for i := range count {
					p := make([]byte, seg)
					if i == count-1 && rng.IntN(2) == 0 {
						p = p[:2+rng.IntN(seg-1)]
					}
					for j := range p {
						p[j] = byte(rng.Uint32())
					}
					p[0], p[1] = byte(len(want)>>8), byte(len(want))
					want = append(want, p)
					from = append(from, si)
					payload = append(payload, p...)
				}
				var oob []byte
				if count > 1 {
					oob = udpsys.AppendUDPSegment(nil, uint16(seg))
				}
				if _, _, err := senders[si].WriteMsgUDPAddrPort(payload, oob, addrOf(b)); err != nil {
					if count > 64 && errors.Is(err, unix.EINVAL) {
						t.Skipf("kernel takes at most 64 segments: %v", err)
					}
					t.Fatalf("send %d x %d: %v", count, seg, err)
				}
				if rng.IntN(5) == 0 {
					want = append(want, []byte{})
					from = append(from, si)
					if _, err := senders[si].WriteToUDPAddrPort(nil, addrOf(b)); err != nil {
						t.Fatal(err)
					}
				}
			}
			sizes := []int{1, 10, 100, 600, 1399, 1400, 1401, 1500, 65527, 65535}
			msgs := make([]Message, 1+rng.IntN(300))
			uniform := sizes[rng.IntN(len(sizes))]
			if rng.IntN(2) == 0 {
				uniform = 0
			}
			for i := range msgs {
				size := uniform
				if size == 0 {
					size = sizes[rng.IntN(len(sizes))]
				}
				msgs[i].Buf = make([]byte, size)
			}
			b.SetReadDeadline(time.Now().Add(5 * time.Second))
			for got := 0; got < len(want); {
				k := 1 + rng.IntN(len(msgs))
				n, err := b.ReadBatch(msgs[:k])
				if err != nil {
					t.Fatalf("after %d of %d: %v", got, len(want), err)
				}
				if n == 0 || n > k {
					t.Fatalf("ReadBatch of %d = %d", k, n)
				}
				for i := range msgs[:n] {
					w, m := want[got+i], &msgs[i]
					if m.Addr != senders[from[got+i]].LocalAddr().(*net.UDPAddr).AddrPort() {
						t.Fatalf("datagram %d from %v", got+i, m.Addr)
					}
					fits := len(w) <= len(m.Buf)
					if m.Truncated == fits || !bytes.Equal(m.Payload(), w[:min(len(w), len(m.Buf))]) {
						t.Fatalf("datagram %d (batch %d, Message %d): %d bytes (truncated %v, Buf %d), want %d",
							got+i, k, i, m.N, m.Truncated, len(m.Buf), len(w))
					}
				}
				got += n
			}
			b.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
			if n, err := b.ReadBatch(msgs); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("%d datagrams more, %v", n, err)
			}
		})
	}
}

// TestReadAfterCloseWithPending closes a Conn whose last read left part
// of a coalesced buffer pending: every read after Close fails with
// net.ErrClosed, as it does on a *net.UDPConn, rather than return the
// datagrams that were left.
func TestReadAfterCloseWithPending(t *testing.T) {
	a, b := pair(t, "udp4", "127.0.0.1", &Options{ReadBuffer: bigBuf, WriteBuffer: bigBuf})
	needGSO(t, a)
	needGRO(t, b)
	out := makeMsgs(10, 100)
	for i := range out {
		out[i].Addr = addrOf(b)
	}
	if n, err := a.WriteBatch(out); n != len(out) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	in := makeMsgs(1, 1500)
	readN(t, b, in, 1, 1)
	b.readMu.Lock()
	pending := len(b.sys.pending)
	b.readMu.Unlock()
	if pending == 0 {
		t.Skip("the datagrams did not arrive coalesced: nothing pending")
	}
	b.Close()
	if n, err := b.ReadBatch(in); n != 0 || !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadBatch after Close = %d, %v; want 0, net.ErrClosed", n, err)
	}
	if n, err := b.ReadQueued(in); n != 0 || !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadQueued after Close = %d, %v; want 0, net.ErrClosed", n, err)
	}
	var buf [1500]byte
	if n, _, err := b.ReadFrom(buf[:]); n != 0 || !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadFrom after Close = %d, %v; want 0, net.ErrClosed", n, err)
	}
}
