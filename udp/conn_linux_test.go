package udp

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
	"syscall"
	"testing"
	"time"

	"github.com/zeroio/zeroio/internal/udpsys"
	"golang.org/x/sys/unix"
)

func TestOffloadIsUsedAndSplitKeepsMetadata(t *testing.T) {
	opts := &Options{PacketInfo: true, ECN: true, ReadBuffer: bigBuf}
	a, b := pair(t, "udp4", "127.0.0.1", opts)
	needGSO(t, a)
	needGRO(t, b)
	out := makeMsgs(100, 1400)
	for i := range out {
		out[i].Addr = addrOf(b)
		out[i].TOS = 1 // ECT(1)
		out[i].Buf[0] = byte(i)
	}
	out[99].Buf = out[99].Buf[:77]
	if _, err := a.WriteAll(out); err != nil {
		t.Fatal(err)
	}
	in := makeMsgs(100, 1400)
	readN(t, b, in, 100, 30) // leftovers carry over between calls
	for i := range in {
		m := &in[i]
		if m.Addr != addrOf(a) || m.Local != netip.MustParseAddr("127.0.0.1") || m.IfIndex == 0 || m.TOS&3 != 1 || m.Buf[0] != byte(i) || m.N != len(out[i].Buf) {
			t.Fatalf("datagram %d: %+v", i, *m)
		}
	}
	if st := a.Stats(); st.GSOSends == 0 {
		t.Fatalf("no GSO send: %+v", st)
	}
	if st := b.Stats(); st.GROReads == 0 {
		t.Fatalf("no coalesced read: %+v", st)
	}
}

func TestEnvironmentTurnsOffloadOff(t *testing.T) {
	t.Setenv("ZEROIO_UDP_GSO", "0")
	t.Setenv("ZEROIO_UDP_GRO", "0")
	a, _ := pair(t, "udp4", "127.0.0.1", nil)
	if st := a.Stats(); st.GSO || st.GRO {
		t.Fatalf("offload on despite environment: %+v", st)
	}
}

// TestWildcardServerRepliesFromAddressReached binds to a wildcard address,
// is reached at 127.0.0.2 (or ::1), and replies with Local set: the client
// sees the reply come from the address it sent to.
func TestWildcardServerRepliesFromAddressReached(t *testing.T) {
	for _, tc := range []struct{ network, wild, client, target string }{
		{"udp4", "0.0.0.0", "127.0.0.1", "127.0.0.2"},
		{"udp", "::", "127.0.0.1", "127.0.0.3"}, // dual-stack server, IPv4 client
		{"udp6", "::", "::1", "::1"},
	} {
		t.Run(tc.network+"/"+tc.target, func(t *testing.T) {
			for _, off := range offloads[:2] {
				opts := off.opts
				opts.PacketInfo = true
				needListen(t, tc.network, tc.wild)
				needListen(t, "udp", tc.client)
				srv, err := Listen(tc.network, net.JoinHostPort(tc.wild, "0"), &opts)
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Close()
				cli, err := Listen("udp", net.JoinHostPort(tc.client, "0"), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer cli.Close()
				target := netip.AddrPortFrom(netip.MustParseAddr(tc.target), addrOf(srv).Port())
				if _, err := cli.WriteBatch([]Message{{Buf: []byte("ping"), Addr: target}}); err != nil {
					t.Fatal(err)
				}
				in := makeMsgs(1, 64)
				readN(t, srv, in, 1, 1)
				if in[0].Local != target.Addr() {
					t.Fatalf("%s: Local = %v, want %v", off.name, in[0].Local, target.Addr())
				}
				reply := []Message{{Buf: []byte("pong"), Addr: in[0].Addr, Local: in[0].Local}}
				if _, err := srv.WriteBatch(reply); err != nil {
					t.Fatal(err)
				}
				readN(t, cli, in, 1, 1)
				if in[0].Addr != target || string(in[0].Payload()) != "pong" {
					t.Fatalf("%s: reply %q from %v, want from %v", off.name, in[0].Payload(), in[0].Addr, target)
				}
			}
		})
	}
}

// TestTOSOnConnectedDualStack sends Message.TOS from a dual-stack socket
// connected to an IPv4 peer and to an IPv6 one, with Addr spelled out and
// left zero (as a connected socket allows), one datagram and a GSO run:
// the receiver sees the TOS each time. With Addr zero it was sent as
// IPV6_TCLASS alone, which the IPv4 path ignores.
func TestTOSOnConnectedDualStack(t *testing.T) {
	for _, peer := range []struct{ network, addr string }{{"udp4", "127.0.0.1"}, {"udp6", "::1"}} {
		t.Run(peer.network, func(t *testing.T) {
			needListen(t, peer.network, peer.addr)
			rx, err := Listen(peer.network, net.JoinHostPort(peer.addr, "0"), &Options{ECN: true, ReadBuffer: bigBuf})
			if err != nil {
				t.Fatal(err)
			}
			defer rx.Close()
			uc, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv6unspecified}, net.UDPAddrFromAddrPort(rx.AddrPort()))
			if err != nil {
				t.Skipf("no dual-stack socket: %v", err)
			}
			tx, err := NewConn(uc, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Close()
			if tx.sys.family != unix.AF_INET6 {
				t.Skipf("family %d, not AF_INET6", tx.sys.family)
			}
			for _, addr := range []netip.AddrPort{rx.AddrPort(), {}} {
				for _, n := range []int{1, 3} {
					out := makeMsgs(n, 100)
					for i := range out {
						out[i].Addr, out[i].TOS = addr, 2 // ECT(0)
					}
					if _, err := tx.WriteAll(out); err != nil {
						t.Fatalf("Addr=%v n=%d: %v", addr, n, err)
					}
					in := makeMsgs(n, 1500)
					readN(t, rx, in, n, n)
					for i := range in {
						if in[i].TOS&3 != 2 || in[i].N != 100 {
							t.Fatalf("Addr=%v n=%d datagram %d: %d bytes, TOS %#x, want ECT(0)", addr, n, i, in[i].N, in[i].TOS)
						}
					}
				}
			}
		})
	}
}

// TestConnRefusedDoesNotPoisonReads: an ICMP port unreachable for a
// connected socket surfaces once as ECONNREFUSED; later reads work.
func TestConnRefusedDoesNotPoisonReads(t *testing.T) {
	gone, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	peerAddr := gone.LocalAddr().(*net.UDPAddr)
	gone.Close()
	uc, err := net.DialUDP("udp4", nil, peerAddr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewConn(uc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.WriteBatch([]Message{{Buf: []byte("anyone?")}})
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	in := makeMsgs(4, 64)
	_, err = c.ReadBatch(in)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err = %v, want ECONNREFUSED", err)
	}
	// The peer comes back on the same port and talks.
	peer, err := net.ListenUDP("udp4", peerAddr)
	if err != nil {
		t.Skipf("port %d taken meanwhile: %v", peerAddr.Port, err)
	}
	defer peer.Close()
	if _, err := peer.WriteToUDPAddrPort([]byte("back"), addrOf(c)); err != nil {
		t.Fatal(err)
	}
	n, err := c.ReadBatch(in)
	if err != nil || n != 1 || string(in[0].Payload()) != "back" {
		t.Fatalf("read after refusal: %d %v %q", n, err, in[0].Payload())
	}
}

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

// TestEIOFallbackThroughTheKernel injects EIO for the first GSO send of a
// real WriteBatch (as a device without checksum offload would answer,
// wireguard-go conn/errors_linux.go) and checks, at the receiving socket,
// that every datagram arrived once and in order, unsegmented from then on.
func TestEIOFallbackThroughTheKernel(t *testing.T) {
	a, b := pair(t, "udp4", "127.0.0.1", &Options{DisableGRO: true, ReadBuffer: bigBuf})
	needGSO(t, a)
	out := makeMsgs(40, 300)
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
// its TOS.
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
				for i := range out {
					d := rng.IntN(2)
					if rng.IntN(4) != 0 && i > 0 { // mostly runs to one place
						d = int(out[i-1].TOS) & 1
					}
					size := []int{1200, 1200, 1200, 700, 1}[rng.IntN(5)]
					m := Message{Buf: make([]byte, size), Addr: addrOf(rx[d]), Local: srcs[rng.IntN(3)], TOS: uint8(d | rng.IntN(2)<<2)}
					m.Buf[0] = byte(len(want[d]))
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
					if m.N != len(w.Buf) || m.Buf[0] != w.Buf[0] || m.TOS != w.TOS || m.Addr.Addr() != from || m.Addr.Port() != srv.AddrPort().Port() {
						t.Fatalf("receiver %d datagram %d: %d bytes [%d] TOS %d from %v; want %d [%d] TOS %d from %v",
							d, i, m.N, m.Buf[0], m.TOS, m.Addr, len(w.Buf), w.Buf[0], w.TOS, from)
					}
				}
			}
		})
	}
}

// TestReadMsgUDPControlSpace: Conn's ReadMsgUDP gives the kernel as much
// control space as the caller's oob (control messages enabled through
// SyscallConn past the Conn's own are not cut, and a whole datagram is not
// reported truncated), and an oob too small for what arrived is flagged
// MSG_CTRUNC, both as package net's ReadMsgUDP does.
func TestReadMsgUDPControlSpace(t *testing.T) {
	for _, std := range []bool{true, false} {
		a, b := pair(t, "udp4", "127.0.0.1", &Options{ReadBuffer: bigBuf})
		rc, err := b.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		rc.Control(func(fd uintptr) {
			for _, o := range [][3]int{
				{unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1},
				{unix.SOL_SOCKET, unix.SO_TIMESTAMPING, unix.SOF_TIMESTAMPING_RX_SOFTWARE | unix.SOF_TIMESTAMPING_SOFTWARE},
				{unix.IPPROTO_IP, unix.IP_PKTINFO, 1}, {unix.IPPROTO_IP, unix.IP_RECVTTL, 1},
				{unix.IPPROTO_IP, unix.IP_RECVTOS, 1}, {unix.IPPROTO_IP, unix.IP_RECVORIGDSTADDR, 1},
			} {
				if err := unix.SetsockoptInt(int(fd), o[0], o[1], o[2]); err != nil {
					t.Fatal(err)
				}
			}
		})
		read := func(buf, oob []byte) (n, oobn, flags int) {
			t.Helper()
			b.SetReadDeadline(time.Now().Add(5 * time.Second))
			if std {
				n, oobn, flags, _, err = b.uc.ReadMsgUDP(buf, oob)
			} else {
				n, oobn, flags, _, err = b.ReadMsgUDP(buf, oob)
			}
			if err != nil {
				t.Fatal(err)
			}
			return n, oobn, flags
		}
		for _, size := range []int{1024, 20} {
			out := makeMsgs(1, 100)
			out[0].Addr = addrOf(b)
			if _, err := a.WriteBatch(out); err != nil {
				t.Fatal(err)
			}
			n, oobn, flags := read(make([]byte, 1500), make([]byte, size))
			trunc, ctrunc := flags&unix.MSG_TRUNC != 0, flags&unix.MSG_CTRUNC != 0
			if n != 100 || trunc || ctrunc != (size == 20) {
				t.Errorf("std=%v, oob of %d: n %d, oobn %d, MSG_TRUNC %v, MSG_CTRUNC %v; want 100 bytes, no MSG_TRUNC, MSG_CTRUNC only for the small oob",
					std, size, n, oobn, trunc, ctrunc)
			}
		}
	}
}

// TestSetBuffers: Conn's SetReadBuffer and SetWriteBuffer size an open
// socket as Options do, past net.core.rmem_max and wmem_max where the
// process is privileged.
func TestSetBuffers(t *testing.T) {
	c, err := Listen("udp4", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 16 << 20
	if err := c.SetReadBuffer(n); err != nil {
		t.Fatal(err)
	}
	if err := c.SetWriteBuffer(n); err != nil {
		t.Fatal(err)
	}
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var rcv, snd int
	rc.Control(func(fd uintptr) {
		rcv, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		snd, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
	})
	if unix.Geteuid() == 0 && (rcv < n || snd < n) { // the kernel doubles what it is given
		t.Errorf("as root: SO_RCVBUF %d, SO_SNDBUF %d after asking for %d", rcv, snd, n)
	}
	c.Close()
	if err := c.SetReadBuffer(n); err == nil {
		t.Error("SetReadBuffer on a closed Conn: no error")
	}
}

// kernelGSO probes the kernel for UDP_SEGMENT (Linux 4.18) on a socket of
// package net's, as the Conn probes its own.
func kernelGSO() bool {
	return probeSockopt(func(fd int) error {
		_, err := unix.GetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT)
		return err
	})
}

// kernelGRO probes the kernel for UDP_GRO (Linux 5.0).
func kernelGRO() bool {
	return probeSockopt(func(fd int) error {
		return unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1)
	})
}

func probeSockopt(f func(fd int) error) bool {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return f(fd) == nil
}

// needGSO skips on a kernel without UDP GSO and fails if c, whose Options
// allow GSO, does not use it.
func needGSO(t testing.TB, c *Conn) {
	t.Helper()
	if !kernelGSO() {
		t.Skip("kernel without UDP GSO (UDP_SEGMENT)")
	}
	if st := c.Stats(); !st.GSO {
		t.Fatalf("GSO off on a kernel that has it: %+v", st)
	}
}

// needGRO skips on a kernel without UDP GRO and fails if c, whose Options
// allow GRO and which pair has read from, does not use it.
func needGRO(t testing.TB, c *Conn) {
	t.Helper()
	if !kernelGRO() {
		t.Skip("kernel without UDP GRO (UDP_GRO)")
	}
	if st := c.Stats(); !st.GRO {
		t.Fatalf("GRO off after a read, on a kernel that has it: %+v", st)
	}
}
