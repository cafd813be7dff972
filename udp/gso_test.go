package udp

import (
	"bytes"
	"errors"
	"net/netip"
	"sync/atomic"
	"syscall"
	"testing"
)

var (
	apA = netip.MustParseAddrPort("127.0.0.1:1000")
	apB = netip.MustParseAddrPort("[::1]:2000")
)

func msgsOfSizes(sizes []int, addrs ...netip.AddrPort) []Message {
	msgs := make([]Message, len(sizes))
	for i, n := range sizes {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i + j)
		}
		msgs[i] = Message{Buf: b, Addr: addrs[i%len(addrs)]}
	}
	return msgs
}

// checkPlan asserts the invariants of a send plan: groups cover msgs in
// order, and every GSO group obeys the kernel's rules.
func checkPlan(t *testing.T, msgs []Message, gs []group, gso bool) {
	t.Helper()
	next := 0
	for _, g := range gs {
		if g.start != next || g.end <= g.start {
			t.Fatalf("group %+v does not continue at %d", g, next)
		}
		next = g.end
		if g.seg == 0 {
			if g.end-g.start != 1 {
				t.Fatalf("plain group %+v holds more than one datagram", g)
			}
			continue
		}
		if !gso {
			t.Fatalf("GSO group %+v planned with GSO off", g)
		}
		n := g.end - g.start
		if n < 2 || n > maxGSOSegments {
			t.Fatalf("GSO group %+v has %d segments", g, n)
		}
		total := 0
		for i := g.start; i < g.end; i++ {
			l := len(msgs[i].Buf)
			total += l
			if msgs[i].Addr != msgs[g.start].Addr || msgs[i].TOS != msgs[g.start].TOS || msgs[i].Local != msgs[g.start].Local {
				t.Fatalf("GSO group %+v mixes destinations or metadata", g)
			}
			if l == 0 || l > g.seg || (i < g.end-1 && l != g.seg) {
				t.Fatalf("GSO group %+v: message %d has %d bytes, segment %d", g, i, l, g.seg)
			}
		}
		if total > maxGSOBytes {
			t.Fatalf("GSO group %+v carries %d bytes", g, total)
		}
	}
	if next != len(msgs) {
		t.Fatalf("plan covers %d of %d messages", next, len(msgs))
	}
}

func TestAdjacent(t *testing.T) {
	arr := make([]byte, 64)
	other := make([]byte, 64)
	bufs := func(bs ...[]byte) []Message {
		msgs := make([]Message, len(bs))
		for i, b := range bs {
			msgs[i].Buf = b
		}
		return msgs
	}
	for _, tc := range []struct {
		name string
		msgs []Message
		want bool
	}{
		{"no messages", nil, false},
		{"one buffer", bufs(arr[:10]), true},
		{"back to back in order", bufs(arr[0:10], arr[10:20], arr[20:25]), true},
		{"capacity past the length does not matter", bufs(arr[0:10:30], arr[10:20:20]), true},
		{"out of order", bufs(arr[10:20], arr[0:10]), false},
		{"a gap", bufs(arr[0:10], arr[11:21]), false},
		{"overlapping", bufs(arr[0:10], arr[5:15]), false},
		{"another array", bufs(arr[0:10], other[0:10]), false},
		{"an empty buffer first", bufs(arr[0:0], arr[0:10]), false},
		{"an empty buffer inside", bufs(arr[0:10], arr[10:10], arr[10:20]), false},
		{"the same buffer twice", bufs(arr[0:10], arr[0:10]), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := adjacent(tc.msgs); got != tc.want {
				t.Fatalf("adjacent = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPlanGroups(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []int
		addrs []netip.AddrPort
		want  []group
	}{
		{"single datagram goes without UDP_SEGMENT", []int{100}, []netip.AddrPort{apA}, []group{{0, 1, 0}}},
		{"equal sizes coalesce", []int{100, 100, 100}, []netip.AddrPort{apA}, []group{{0, 3, 100}}},
		{"last may be shorter", []int{100, 100, 40}, []netip.AddrPort{apA}, []group{{0, 3, 100}}},
		{"shorter ends the run", []int{100, 40, 100, 100}, []netip.AddrPort{apA}, []group{{0, 2, 100}, {2, 4, 100}}},
		{"longer starts a new run", []int{40, 40, 100, 100}, []netip.AddrPort{apA}, []group{{0, 2, 40}, {2, 4, 100}}},
		{"destinations alternate", []int{100, 100, 100}, []netip.AddrPort{apA, apB}, []group{{0, 1, 0}, {1, 2, 0}, {2, 3, 0}}},
		{"empty datagram is sent alone", []int{100, 0, 100}, []netip.AddrPort{apA}, []group{{0, 1, 0}, {1, 2, 0}, {2, 3, 0}}},
		{"46 x 1400 fit in 65507 bytes", repeat(1400, 47), []netip.AddrPort{apA}, []group{{0, 46, 1400}, {46, 47, 0}}},
		{"64 segments at most", repeat(10, 130), []netip.AddrPort{apA}, []group{{0, 64, 10}, {64, 128, 10}, {128, 130, 10}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs := msgsOfSizes(tc.sizes, tc.addrs...)
			gs := planGroups(nil, msgs, true)
			checkPlan(t, msgs, gs, true)
			if len(gs) != len(tc.want) {
				t.Fatalf("plan %v, want %v", gs, tc.want)
			}
			for i := range gs {
				if gs[i] != tc.want[i] {
					t.Fatalf("plan %v, want %v", gs, tc.want)
				}
			}
			checkPlan(t, msgs, planGroups(nil, msgs, false), false)
		})
	}
}

func repeat(n, count int) []int {
	s := make([]int, count)
	for i := range s {
		s[i] = n
	}
	return s
}

// fakeKernel records the datagrams it "sends", segmenting GSO groups the
// way the kernel does, and can fail the way a kernel can.
type fakeKernel struct {
	sent      [][]byte
	limit     int  // groups accepted per call before a partial return; 0 = all
	eioOnGSO  bool // EIO for a GSO group, as a device without checksum offload
	calls     int
	gsoGroups int
}

func (k *fakeKernel) send(msgs []Message, gs []group) (int, error) {
	k.calls++
	for i, g := range gs {
		if k.limit > 0 && i == k.limit {
			return i, nil
		}
		if g.seg > 0 {
			if k.eioOnGSO {
				return i, syscall.EIO
			}
			k.gsoGroups++
		}
		for j := g.start; j < g.end; j++ {
			k.sent = append(k.sent, bytes.Clone(msgs[j].Buf))
		}
	}
	return len(gs), nil
}

func TestWriteGroupsEIOFallsBackWithoutLossOrDuplicates(t *testing.T) {
	// two plain datagrams to different destinations go first, then a GSO run
	msgs := msgsOfSizes([]int{7, 9, 100, 100, 100, 30}, apA, apB, apA, apA, apA, apA)
	msgs[1].Addr = apB
	for i := 2; i < len(msgs); i++ {
		msgs[i].Addr = apA
	}
	var gso atomic.Bool
	gso.Store(true)
	k := &fakeKernel{eioOnGSO: true}
	var scratch []group
	n, fellBack, err := writeGroups(msgs, &gso, &scratch, k.send)
	if err != nil || n != len(msgs) || !fellBack || gso.Load() {
		t.Fatalf("n=%d fellBack=%v err=%v gso=%v", n, fellBack, err, gso.Load())
	}
	if len(k.sent) != len(msgs) {
		t.Fatalf("kernel saw %d datagrams, want %d", len(k.sent), len(msgs))
	}
	for i := range msgs {
		if !bytes.Equal(k.sent[i], msgs[i].Buf) || msgs[i].N != len(msgs[i].Buf) {
			t.Fatalf("datagram %d differs or N=%d", i, msgs[i].N)
		}
	}
	// GSO stays off for the next call.
	k2 := &fakeKernel{eioOnGSO: true}
	if n, _, err := writeGroups(msgs, &gso, &scratch, k2.send); err != nil || n != len(msgs) || k2.calls != 1 {
		t.Fatalf("after fallback: n=%d err=%v calls=%d", n, err, k2.calls)
	}
}

func TestWriteGroupsReportsPartialSendExactly(t *testing.T) {
	msgs := msgsOfSizes([]int{100, 100, 100, 50, 7, 7}, apA)
	var gso atomic.Bool
	gso.Store(true)
	k := &fakeKernel{limit: 1} // one sendmmsg header goes out: the GSO run of 4
	var scratch []group
	n, _, err := writeGroups(msgs, &gso, &scratch, k.send)
	if err != nil || n != 4 || len(k.sent) != 4 {
		t.Fatalf("n=%d sent=%d err=%v, want 4", n, len(k.sent), err)
	}
	if msgs[4].N != 0 {
		t.Fatalf("unsent message has N=%d", msgs[4].N)
	}
}

func TestWriteGroupsEINVALResendsUnsegmentedAndKeepsGSO(t *testing.T) {
	msgs := msgsOfSizes([]int{3000, 3000, 3000, 100}, apA) // above a 1500-byte path MTU
	msgs[3].Addr = apB
	var gso atomic.Bool
	gso.Store(true)
	var kernel [][]byte
	send := func(ms []Message, gs []group) (int, error) {
		for i, g := range gs {
			if g.seg > 1472 {
				return i, syscall.EINVAL
			}
			for j := g.start; j < g.end; j++ {
				kernel = append(kernel, ms[j].Buf)
			}
		}
		return len(gs), nil
	}
	var scratch []group
	n, fellBack, err := writeGroups(msgs, &gso, &scratch, send)
	if err != nil || n != 4 || fellBack || !gso.Load() || len(kernel) != 4 {
		t.Fatalf("n=%d fellBack=%v gso=%v err=%v sent=%d", n, fellBack, gso.Load(), err, len(kernel))
	}
}

func TestWriteGroupsOtherErrorsKeepGSO(t *testing.T) {
	msgs := msgsOfSizes([]int{100, 100}, apA)
	var gso atomic.Bool
	gso.Store(true)
	var scratch []group
	_, fellBack, err := writeGroups(msgs, &gso, &scratch, func([]Message, []group) (int, error) {
		return 0, syscall.EPERM
	})
	if !errors.Is(err, syscall.EPERM) || fellBack || !gso.Load() {
		t.Fatalf("err=%v fellBack=%v gso=%v", err, fellBack, gso.Load())
	}
}

// FuzzPlanGroups checks the plan's invariants and that sending it through a
// kernel that fails every GSO send with EIO still delivers each datagram
// once, in order.
func FuzzPlanGroups(f *testing.F) {
	f.Add([]byte{100, 100, 100, 40}, []byte{0, 0, 0, 0}, uint8(0))
	f.Add([]byte{1, 2, 3}, []byte{0, 1, 0}, uint8(2))
	f.Add([]byte{255, 255, 255, 255, 255, 0, 255}, []byte{0}, uint8(3))
	f.Add([]byte{}, []byte{}, uint8(1))
	f.Fuzz(func(t *testing.T, sizes, dests []byte, mode uint8) {
		if len(sizes) > 600 {
			sizes = sizes[:600]
		}
		msgs := make([]Message, len(sizes))
		for i, s := range sizes {
			n := int(s) * 7 // up to 1785 bytes: exercises the 65507 limit
			if mode&1 != 0 {
				n = int(s) * 300
			}
			msgs[i].Buf = make([]byte, n)
			if n > 0 {
				msgs[i].Buf[0] = byte(i)
			}
			msgs[i].Addr = apA
			if len(dests) > 0 && dests[i%len(dests)]&1 != 0 {
				msgs[i].Addr = apB
			}
		}
		gs := planGroups(nil, msgs, true)
		checkPlan(t, msgs, gs, true)
		var gso atomic.Bool
		gso.Store(true)
		k := &fakeKernel{eioOnGSO: mode&2 != 0, limit: int(mode>>2) % 5}
		var scratch []group
		sent := 0
		for sent < len(msgs) {
			n, _, err := writeGroups(msgs[sent:], &gso, &scratch, k.send)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Fatal("no progress")
			}
			sent += n
		}
		if len(k.sent) != len(msgs) {
			t.Fatalf("kernel saw %d datagrams, want %d", len(k.sent), len(msgs))
		}
		for i := range msgs {
			if !bytes.Equal(k.sent[i], msgs[i].Buf) {
				t.Fatalf("datagram %d out of order or changed", i)
			}
		}
	})
}
