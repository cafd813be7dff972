package udp

// GRO reads: splitting the buffers the kernel coalesced into one Message
// per datagram, copying as little as the callers' buffers allow.

import (
	"github.com/zeroio/zeroio/internal/udpsys"
	"golang.org/x/sys/unix"
)

// groSlots is how many coalesced buffers (groBufSize each) one GRO read
// asks the kernel for: up to 64 datagrams each.
const groSlots = 8

// readGRO reads from a socket with UDP_GRO on. Once a coalesced read has shown the flow's segment size g, and
// every Buf holds g bytes, readScatter lets the kernel write each datagram
// straight into its Message; otherwise readSpill reads into internal 64 KiB
// buffers and copies.
func (c *Conn) readGRO(msgs []Message) (int, error) {
	coalesced := c.sys.coalesced
	c.sys.coalesced = false // until this read sees a coalesced buffer
	if g := c.sys.groSeg; coalesced && g > 0 && buffersHold(msgs, g) {
		return c.readScatter(msgs, g)
	}
	if !coalesced && buffersHold(msgs, groWholeBuf) {
		return c.readBig(msgs)
	}
	s := readPool.Get().(*readScratch)
	slots := min(len(msgs), groSlots)
	s.prepare(slots, c.ctlStride(msgs))
	s.growSpill(slots, slots)
	for i := range slots {
		setIov(&s.iovs[i], s.spill[i])
	}
	if err := s.recvmmsg(c); err != nil {
		putRead(s)
		return 0, err
	}
	s.fillSpill()
	return c.deliverSpill(s, msgs, 0), nil
}

// fillSpill marks the s.n buffers just read into the spill buffers as the
// data still to deliver.
func (s *readScratch) fillSpill() {
	for k := range s.n {
		s.data[k] = s.spill[k][:min(int(s.hs[k].Len), len(s.spill[k]))]
		s.cut[k] = int(s.hs[k].Len) > len(s.spill[k])
	}
	s.next, s.off, s.counted = 0, 0, 0
}

func buffersHold(msgs []Message, g int) bool {
	for i := range msgs {
		if len(msgs[i].Buf) < g {
			return false
		}
	}
	return true
}

// growSpill makes sure s has at least spills spill buffers, and data and
// cut entries for headers headers.
func (s *readScratch) growSpill(spills, headers int) {
	for len(s.spill) < spills {
		s.spill = append(s.spill, make([]byte, groBufSize))
	}
	s.data = udpsys.Grow(s.data, max(headers, len(s.data)))
	s.cut = udpsys.Grow(s.cut, len(s.data))
}

// deliverSpill splits the buffers in s.data[s.next:s.n] (from byte s.off of
// the first) into msgs[p:], copying, and returns how many messages are now
// filled. s is a new read (no read is pending then) or the oldest pending
// one. What does not fit stays in s, which is then the oldest pending read.
func (c *Conn) deliverSpill(s *readScratch, msgs []Message, p int) int {
	for s.next < s.n && p < len(msgs) {
		var meta Message
		ctl := s.meta(s.next, &meta)
		lost := s.lostGRO(s.next, ctl)
		data := s.data[s.next]
		if s.off == 0 && s.next >= s.counted && ctl.GSOSize > 0 && ctl.GSOSize < len(data) {
			c.groReads.Add(1)
			c.sys.groSeg = ctl.GSOSize
			c.sys.coalesced = true
		}
		meta.Flags &^= unix.MSG_TRUNC
		f, used := splitGRO(msgs[p:], data[s.off:], ctl.GSOSize, &meta)
		for i := p; i < p+f; i++ {
			copyOOB(&msgs[i], s.ctlOf(s.next))
		}
		p += f
		s.off += used
		if s.off >= len(data) {
			if (s.cut[s.next] || lost) && f > 0 {
				// A cut buffer cannot happen with 64 KiB buffers and 64 KiB
				// IP packets, nor a lost segment size with the control
				// buffer the Conn sizes; never pass either off as whole.
				msgs[p-1].Truncated = true
			}
			s.next++
			s.off = 0
		}
	}
	q := c.sys.pending
	queued := len(q) > 0 && q[0] == s
	switch {
	case s.next < s.n && !queued:
		c.sys.pending = append(q, s)
	case s.next >= s.n && queued:
		copy(q, q[1:])
		q[len(q)-1] = nil
		c.sys.pending = q[:len(q)-1]
		putRead(s)
	case s.next >= s.n:
		putRead(s)
	}
	return p
}

// scatterSlot is how many Messages one recvmmsg header of readScatter
// spans: UDP_GRO_CNT_MAX (net/ipv4/udp_offload.c), the most datagrams GRO
// merges.
const scatterSlot = 64

// readScatter is the zero-copy GRO read. Each recvmmsg header gets the
// iovecs Buf[:g] of up to scatterSlot consecutive Messages, then a 64 KiB
// spill buffer. When the flow's segment size is g, the kernel's copy out of
// a coalesced buffer lands each datagram in its own Message; the Buf slices
// of Messages left empty by a short slot are exchanged so that the filled
// ones come first, in order. A slot whose layout does not match (another
// segment size, a larger single datagram), and anything after it, is
// gathered into the spill buffers and split with copies.
func (c *Conn) readScatter(msgs []Message, g int) (int, error) {
	m := len(msgs)
	slots := (m + scatterSlot - 1) / scatterSlot
	s := readPool.Get().(*readScratch)
	s.prepare(slots, c.ctlStride(msgs))
	s.growSpill(slots, slots)
	s.iovs = udpsys.Grow(s.iovs, m+slots)
	for k := range slots {
		a, b := k*scatterSlot, min((k+1)*scatterSlot, m)
		for j := a; j < b; j++ {
			setIov(&s.iovs[j+k], msgs[j].Buf[:g])
		}
		setIov(&s.iovs[b+k], s.spill[k])
		s.hs[k].Hdr.Iov = &s.iovs[a+k]
		s.hs[k].Hdr.SetIovlen(b - a + 1)
	}
	if err := s.recvmmsg(c); err != nil {
		putRead(s)
		return 0, err
	}
	p := 0
	for k := 0; k < s.n; k++ {
		a, b := k*scatterSlot, min((k+1)*scatterSlot, m)
		total := int(s.hs[k].Len)
		var meta Message
		ctl := s.meta(k, &meta)
		meta.Flags &^= unix.MSG_TRUNC
		seg := ctl.GSOSize
		if seg <= 0 || seg > total {
			seg = total
		}
		count := 1
		if total > 0 {
			count = (total + seg - 1) / seg
		}
		inBufs := min(count, b-a)
		if !(seg == g || (count == 1 && total <= g)) || (count > inBufs && k < s.n-1) || s.lostGRO(k, ctl) {
			// Layout mismatch, or datagrams spilled past this slot's
			// Messages with the next slot's behind them (only a kernel
			// merging more than 64 can do that), or a layout unknown:
			// gather this slot and the rest, then copy.
			if count > 1 && seg != g {
				c.sys.groSeg = seg
			} else if count == 1 && total > g {
				c.sys.groSeg = 0
			}
			for j := k; j < s.n; j++ {
				s.gather(j, msgs, g, m)
			}
			s.next, s.off, s.counted = k, 0, k
			return c.deliverSpill(s, msgs, p), nil
		}
		if count > 1 {
			c.groReads.Add(1)
			c.sys.coalesced = true
		}
		ctlb := s.ctlOf(k)
		for j := range inBufs {
			if pos := a + j; pos != p {
				msgs[p].Buf, msgs[pos].Buf = msgs[pos].Buf, msgs[p].Buf
			}
			mp := &msgs[p]
			mp.Addr, mp.Local, mp.IfIndex, mp.TOS, mp.Flags = meta.Addr, meta.Local, meta.IfIndex, meta.TOS, meta.Flags
			mp.N = min(seg, total-j*seg)
			mp.Truncated = false
			copyOOB(mp, ctlb)
			p++
		}
		if count > inBufs { // last slot: the rest is in the spill buffer, g-aligned
			rest := total - inBufs*g
			s.data[k] = s.spill[k][:min(rest, len(s.spill[k]))]
			s.cut[k] = rest > len(s.spill[k])
			s.next, s.off, s.counted = k, 0, k+1
			return c.deliverSpill(s, msgs, p), nil
		}
	}
	putRead(s)
	return p, nil
}

// groWholeBuf is the largest UDP payload of an IPv6 packet, 65535 - 8: a Buf
// this large holds any buffer GRO can coalesce.
const groWholeBuf = 1<<16 - 1 - 8

// readBig is the GRO read for callers whose every Buf can hold a whole
// coalesced buffer (wireguard-go and the relay use 64 KiB buffers), while
// the traffic is not coalescing: one recvmmsg header per Message, as
// without GRO, so single datagrams from many peers arrive zero-copy, many
// per call. A coalesced buffer is expanded in place: its first datagram
// stays in its Buf (exchanged forward), the others are copied into the
// Bufs of the Messages after it. Datagrams past the end of msgs are copied
// into spill buffers and returned by the next ReadBatch.
func (c *Conn) readBig(msgs []Message) (int, error) {
	m := len(msgs)
	s := readPool.Get().(*readScratch)
	s.prepare(m, c.ctlStride(msgs))
	for i := range msgs {
		setIov(&s.iovs[i], msgs[i].Buf)
	}
	if err := s.recvmmsg(c); err != nil {
		putRead(s)
		return 0, err
	}
	// Where each slot's datagrams go: pos[k] = datagrams before slot k.
	s.pos = udpsys.Grow(s.pos, s.n+1)
	s.pos[0] = 0
	last, lastFit := -1, 0 // the last slot that (partly) fits, and how many of its datagrams do
	for k := range s.n {
		seg, count := s.segments(k)
		if seg < int(s.hs[k].Len) {
			c.groReads.Add(1)
			c.sys.coalesced = true
			c.sys.groSeg = seg
		}
		if s.pos[k] < m {
			last, lastFit = k, min(count, m-s.pos[k])
		}
		s.pos[k+1] = s.pos[k] + count
	}
	s.counted = s.n
	s.spillRest(msgs, last, lastFit)
	s.expand(msgs, last, lastFit)
	n := s.pos[last] + lastFit
	if s.next < s.n {
		c.sys.pending = append(c.sys.pending, s)
	} else {
		putRead(s)
	}
	return n, nil
}

// spillRest copies the datagrams of a recvmmsg that do not fit in msgs
// into spill buffers, for the next ReadBatch: they are still in
// msgs[k].Buf for k > last, and in the tail of msgs[last].Buf past its
// first lastFit datagrams.
func (s *readScratch) spillRest(msgs []Message, last, lastFit int) {
	// Only the headers that wait, [next, n), take a spill buffer, in
	// order: a large batch whose head coalesced needs a few, not one per
	// header.
	if _, count := s.segments(last); lastFit < count || last < s.n-1 {
		s.next, s.off = last, 0
		if lastFit == count { // the last slot fits whole: only later ones wait
			s.next++
		}
		s.growSpill(s.n-s.next, s.n)
		for k := s.next; k < s.n; k++ {
			from := 0
			if k == last {
				seg, _ := s.segments(k)
				from = lastFit * seg
			}
			total := min(int(s.hs[k].Len), len(msgs[k].Buf))
			sp := s.spill[k-s.next]
			s.data[k] = sp[:copy(sp, msgs[k].Buf[from:total])]
			s.cut[k] = int(s.hs[k].Len) > len(msgs[k].Buf)
		}
	} else {
		s.next = s.n
	}
}

// expand spreads the datagrams of slots [0, last] (of slot last, its
// first lastFit) over msgs, each slot's into the Messages from pos[k].
func (s *readScratch) expand(msgs []Message, last, lastFit int) {
	// Expand backwards: slot k's target Messages [pos[k], pos[k+1]) are at
	// or after k and hold no data still needed, since later slots moved
	// out already.
	for k := last; k >= 0; k-- {
		seg, count := s.segments(k)
		if k == last {
			count = lastFit
		}
		p := s.pos[k]
		if p != k {
			msgs[p].Buf, msgs[k].Buf = msgs[k].Buf, msgs[p].Buf
		}
		total := int(s.hs[k].Len)
		var meta Message
		ctl := s.meta(k, &meta)
		meta.Flags &^= unix.MSG_TRUNC
		src := msgs[p].Buf
		ctlb := s.ctlOf(k)
		for j := count - 1; j >= 0; j-- { // the first last: it holds the source
			mp := &msgs[p+j]
			size := min(seg, total-j*seg)
			if j > 0 {
				mp.N = copy(mp.Buf, src[j*seg:min(j*seg+size, len(src))])
			} else {
				mp.N = min(size, len(mp.Buf))
			}
			mp.Truncated = mp.N < size
			mp.Addr, mp.Local, mp.IfIndex, mp.TOS, mp.Flags = meta.Addr, meta.Local, meta.IfIndex, meta.TOS, meta.Flags
			copyOOB(mp, ctlb)
		}
		if (s.hs[k].Hdr.Flags&unix.MSG_TRUNC != 0 || s.lostGRO(k, ctl)) && count > 0 {
			msgs[p+count-1].Truncated = true // never pass a cut buffer off as whole
		}
	}
}

// segments returns the datagram size and count of header k's buffer.
func (s *readScratch) segments(k int) (seg, count int) {
	total := int(s.hs[k].Len)
	seg = udpsys.ParseControl(s.ctlOf(k)).GSOSize
	if seg <= 0 || seg >= total {
		return total, 1
	}
	return seg, (total + seg - 1) / seg
}

// gather moves slot k's datagrams, which the kernel spread over the
// Messages' Buf[:g] and the spill buffer, into the spill buffer alone.
func (s *readScratch) gather(k int, msgs []Message, g, m int) {
	a, b := k*scatterSlot, min((k+1)*scatterSlot, m)
	sp := s.spill[k]
	total := min(int(s.hs[k].Len), len(sp))
	head := min(total, (b-a)*g)
	tail := total - head
	copy(sp[head:head+tail], sp[:tail])
	for j := 0; j*g < head; j++ {
		copy(sp[j*g:], msgs[a+j].Buf[:min(g, head-j*g)])
	}
	s.data[k] = sp[:total]
	s.cut[k] = int(s.hs[k].Len) > len(sp)
}
