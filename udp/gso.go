package udp

import (
	"errors"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Kernel limits on one UDP_SEGMENT (GSO) send.
const (
	// maxGSOSegments is UDP_MAX_SEGMENTS (include/linux/udp.h): 64 since
	// Linux 4.18 (kernel commit bec1f6f69736); later kernels raised it to
	// 128, so 64 is safe everywhere.
	maxGSOSegments = 64
	// maxGSOBytes is the largest UDP payload of an IPv4 packet, 65535 - 20
	// (IPv4 header) - 8 (UDP header): more gives EMSGSIZE. 46 x 1400 fits,
	// 47 x 1400 does not.
	maxGSOBytes = 1<<16 - 1 - 20 - 8
)

// group is one send: msgs[start:end] as one datagram (seg == 0) or as one
// UDP_SEGMENT send of end-start datagrams of seg bytes, the last of which
// may be shorter.
type group struct {
	start, end int
	seg        int
}

// planGroups appends to dst the sends that carry msgs, in order. Without
// gso every message is its own group. With gso, a run of consecutive
// messages is coalesced when they share Addr, Local, IfIndex and TOS, carry
// no caller OOB, are all of the run's first size (the last may be shorter
// but not empty), and stay within maxGSOSegments and maxGSOBytes. A run of
// one is sent without UDP_SEGMENT. It is a pure function so that it can be
// tested and fuzzed on any GOOS.
func planGroups(dst []group, msgs []Message, gso bool) []group {
	for i := 0; i < len(msgs); {
		g := group{start: i, end: i + 1}
		first := &msgs[i]
		seg := len(first.Buf)
		if gso && seg > 0 && len(first.OOB) == 0 {
			total := seg
			for j := i + 1; j < len(msgs) && j-i < maxGSOSegments; j++ {
				m := &msgs[j]
				l := len(m.Buf)
				if l == 0 || l > seg || total+l > maxGSOBytes || len(m.OOB) != 0 ||
					m.Addr != first.Addr || m.Local != first.Local ||
					m.IfIndex != first.IfIndex || m.TOS != first.TOS {
					break
				}
				total += l
				g.end = j + 1
				if l < seg { // a shorter datagram ends the run
					break
				}
			}
			if g.end-g.start > 1 {
				g.seg = seg
			}
		}
		dst = append(dst, g)
		i = g.end
	}
	return dst
}

// adjacent reports whether the Bufs of msgs lie back to back in memory,
// each starting where the one before ends (sub-slices of one array, in
// order), so that one iovec from msgs[0].Buf's first byte covers them
// all. Empty Bufs never count as adjacent. Addresses are compared as
// integers: no pointer is made past the end of a Buf.
func adjacent(msgs []Message) bool {
	if len(msgs) == 0 || len(msgs[0].Buf) == 0 {
		return false
	}
	next := uintptr(unsafe.Pointer(unsafe.SliceData(msgs[0].Buf))) + uintptr(len(msgs[0].Buf))
	for i := 1; i < len(msgs); i++ {
		b := msgs[i].Buf
		if len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b))) != next {
			return false
		}
		next += uintptr(len(b))
	}
	return true
}

// sendFunc is the kernel hook under writeGroups: it sends groups of msgs
// (one sendmmsg on Linux) and returns how many groups went out whole, and
// the error that stopped the next one, if any.
type sendFunc func(msgs []Message, groups []group) (int, error)

// writeGroups sends msgs through send, coalescing with GSO while gso holds
// true, and returns how many messages went out (msgs[:n], each wholly), as
// sendmmsg reports them. If the kernel refuses a GSO send, the messages
// from the failed send on are resent unsegmented: nothing is lost (the
// failed sendmsg sent nothing) and nothing is sent twice. EIO means the
// device cannot checksum-offload GSO (wireguard-go conn/errors_linux.go,
// Tailscale's neterror.ShouldDisableUDPGSO): GSO is switched off in gso for
// good and fellBack reports it. EINVAL or EMSGSIZE means this send cannot be
// segmented (udp_send_skb in net/ipv4/udp.c refuses a segment size above
// the path MTU, which a plain datagram would pass as IP fragments): only
// this call goes unsegmented. scratch is reused for the plan.
func writeGroups(msgs []Message, gso *atomic.Bool, scratch *[]group, send sendFunc) (n int, fellBack bool, err error) {
	gs := planGroups((*scratch)[:0], msgs, gso.Load())
	*scratch = gs
	sent, err := send(msgs, gs)
	if sent > 0 {
		n = gs[sent-1].end
	}
	if err != nil && sent < len(gs) && gs[sent].seg > 0 && gsoRefused(err) {
		if errors.Is(err, syscall.EIO) {
			gso.Store(false)
			fellBack = true
		}
		rest := msgs[n:]
		gs = planGroups(gs[:0], rest, false)
		*scratch = gs
		sent, err = send(rest, gs)
		if sent > 0 {
			n += gs[sent-1].end
		}
	}
	for i := range msgs[:n] {
		msgs[i].N = len(msgs[i].Buf)
	}
	return n, fellBack, err
}
