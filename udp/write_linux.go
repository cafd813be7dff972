package udp

// Batch writes: sendmmsg(2) with GSO, one iovec per datagram or per run.

import (
	"sync"
	"unsafe"

	"github.com/zeroio/zeroio/internal/sockaddr"
	"github.com/zeroio/zeroio/internal/udpsys"
	"golang.org/x/sys/unix"
)

// writeScratch is the per-call memory of a WriteBatch. sendFn (the kernel
// hook handed to writeGroups) and call (the RawConn callback) are bound
// once when it is made.
type writeScratch struct {
	c      *Conn
	groups []group
	hs     []unix.Mmsghdr
	iovs   []unix.Iovec
	names  []sockaddr.Inet
	ctl    []byte
	ctlOff []int
	sendFn sendFunc
	call   *udpsys.MmsgCall
}

var writePool = sync.Pool{New: func() any {
	s := &writeScratch{call: udpsys.NewMmsgCall(unix.SYS_SENDMMSG)}
	s.sendFn = s.send
	return s
}}

// send packs groups of msgs into mmsghdrs (one iovec per datagram, no
// payload copy) and sends them with one sendmmsg.
func (s *writeScratch) send(msgs []Message, groups []group) (int, error) {
	c := s.c
	s.hs = udpsys.Grow(s.hs, len(groups))
	s.names = udpsys.Grow(s.names, len(groups))
	s.ctlOff = udpsys.Grow(s.ctlOff, len(groups)+1)
	s.iovs = udpsys.Grow(s.iovs, len(msgs))
	s.ctl = s.ctl[:0]
	var badAddr error
	ng := 0
	for gi, g := range groups {
		m := &msgs[g.start]
		var namelen uint32
		if m.Addr.IsValid() {
			namelen = sockaddr.PutInet(&s.names[gi], c.sys.family, m.Addr)
			if namelen == 0 {
				badAddr = unix.EAFNOSUPPORT
				break
			}
		}
		iovs := s.setIovs(msgs, g)
		s.ctlOff[gi] = len(s.ctl)
		s.ctl = appendControl(s.ctl, c.sys.family, m, g.seg)
		h := &s.hs[gi]
		h.Len = 0
		h.Hdr = unix.Msghdr{Iov: &s.iovs[g.start], Namelen: namelen}
		h.Hdr.SetIovlen(iovs)
		if namelen > 0 {
			h.Hdr.Name = (*byte)(unsafe.Pointer(&s.names[gi]))
		}
		ng++
	}
	if ng == 0 {
		return 0, badAddr
	}
	s.ctlOff[ng] = len(s.ctl)
	for gi := range ng { // s.ctl may have moved while growing
		if l := s.ctlOff[gi+1] - s.ctlOff[gi]; l > 0 {
			s.hs[gi].Hdr.Control = &s.ctl[s.ctlOff[gi]]
			s.hs[gi].Hdr.SetControllen(l)
		}
	}
	s.call.Hs = s.hs[:ng]
	err := c.rc.Write(s.call.Fn)
	s.call.Hs = nil
	if err != nil {
		return 0, err
	}
	if s.call.Errno != 0 {
		return 0, s.call.Errno
	}
	n := s.call.N
	for _, g := range groups[:n] {
		if g.seg > 0 {
			c.gsoSends.Add(1)
		}
	}
	if n == ng && badAddr != nil {
		return n, badAddr
	}
	return n, nil
}

// setIovs points the iovecs of group g at its payloads and returns how
// many it used, from s.iovs[g.start]: one per datagram, or one for the
// whole group when it is a GSO run whose Bufs lie back to back in memory
// (sub-slices of one array), which the kernel copies in one stretch.
func (s *writeScratch) setIovs(msgs []Message, g group) int {
	if g.seg > 0 && adjacent(msgs[g.start:g.end]) {
		v := &s.iovs[g.start]
		v.Base = &msgs[g.start].Buf[0]
		v.SetLen((g.end-g.start-1)*g.seg + len(msgs[g.end-1].Buf))
		return 1
	}
	for j := g.start; j < g.end; j++ {
		setIov(&s.iovs[j], msgs[j].Buf)
	}
	return g.end - g.start
}

// WriteBatch writes the datagrams in msgs and returns how many went out,
// msgs[:n], each whole; msgs[i].N is set for those. On Linux it is one
// sendmmsg(2), which may send fewer than len(msgs) without an error: call
// it again for the rest, or use [Conn.WriteAll].
//
// With GSO on, consecutive messages to the same Addr (with the same Local
// and TOS and no OOB) whose sizes are equal, the last possibly shorter,
// go out as one UDP_SEGMENT send of at most 64 datagrams and 65,507 bytes.
// Payloads are not copied: the send points one iovec at each, or a single
// one at the whole run when its Bufs are sub-slices of one array, back to
// back in order, which the kernel copies fastest. If the kernel refuses a
// GSO send with EIO, GSO is switched off for this Conn and the datagrams
// are resent without it; with EINVAL or EMSGSIZE (datagrams larger than
// the path MTU, which only unsegmented sends may fragment), this call
// resends them without it. None is lost or sent twice.
//
// A message whose Addr cannot be sent on this socket (IPv6 on an IPv4
// socket) stops the batch there with an error.
func (c *Conn) WriteBatch(msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	s := writePool.Get().(*writeScratch)
	s.c = c
	n, fellBack, err := writeGroups(msgs, &c.gso, &s.groups, s.sendFn)
	s.c = nil
	writePool.Put(s)
	if fellBack {
		c.gsoFallbacks.Add(1)
	}
	if err != nil {
		return n, c.opError("sendmmsg", err)
	}
	return n, nil
}
