package udp

import (
	"errors"
	"sync"
	"unsafe"

	"github.com/zeroio/zeroio/internal/udpsys"
	"golang.org/x/sys/unix"
)

// groSlots is how many coalesced buffers (groBufSize each) one GRO read
// asks the kernel for: up to 64 datagrams each.
const groSlots = 8

// sysConn is the Linux state of a Conn.
type sysConn struct {
	family  int  // AF_INET or AF_INET6
	wantCtl bool // PacketInfo or ECN: reads need a control buffer
	// pending: GRO reads whose datagrams are not all delivered, oldest
	// first (more than one only after a hand-out drained the socket);
	// guarded by readMu
	pending []*readScratch
	groSeg  int  // segment size of the last coalesced read; guarded by readMu
	started bool // the first read has been made; guarded by readMu
	nowait  bool // ReadQueued: the read does not wait; guarded by readMu
	// coalesced: the last read saw a coalesced buffer; guarded by readMu
	coalesced bool
}

func (c *Conn) setup() error {
	var err error
	cerr := c.rc.Control(func(fd uintptr) {
		err = c.setupFD(int(fd))
	})
	if cerr != nil {
		return cerr
	}
	return err
}

// setBuffer sets a socket buffer's size with the FORCE option, which a
// privileged process may use past net.core.rmem_max and wmem_max, and
// falls back to the plain one, which the kernel caps there.
func setBuffer(fd, force, plain, n int) error {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, n) == nil {
		return nil
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, n)
}

// SetReadBuffer sets the socket's receive buffer size as
// [Options].ReadBuffer does: past net.core.rmem_max where the process may.
func (c *Conn) SetReadBuffer(n int) error {
	return c.setBufferOpt(unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, n)
}

// SetWriteBuffer sets the socket's send buffer size as
// [Options].WriteBuffer does: past net.core.wmem_max where the process may.
func (c *Conn) SetWriteBuffer(n int) error {
	return c.setBufferOpt(unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, n)
}

func (c *Conn) setBufferOpt(force, plain, n int) error {
	var err error
	if cerr := c.rc.Control(func(fd uintptr) { err = setBuffer(int(fd), force, plain, n) }); cerr != nil {
		err = cerr
	}
	if err != nil {
		return c.opError("setsockopt", err)
	}
	return nil
}

func (c *Conn) setupFD(fd int) error {
	family, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return err
	}
	c.sys.family = family
	if n := c.opts.ReadBuffer; n > 0 {
		if err := setBuffer(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, n); err != nil {
			return err
		}
	}
	if n := c.opts.WriteBuffer; n > 0 {
		if err := setBuffer(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, n); err != nil {
			return err
		}
	}
	// GSO is probed by reading UDP_SEGMENT (ENOPROTOOPT before Linux 4.18),
	// as wireguard-go conn/features_linux.go does.
	if !c.opts.DisableGSO {
		if _, err := unix.GetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT); err == nil {
			c.gso.Store(true)
		}
	}
	// UDP_GRO waits for the first read (startGRO): a socket handed out
	// before it never has GRO on.
	v6 := family == unix.AF_INET6
	if c.opts.PacketInfo {
		c.sys.wantCtl = true
		if v6 {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1); err != nil {
				return err
			}
			// A dual-stack socket reports IPv4 datagrams with IP_PKTINFO;
			// on a V6ONLY socket this may fail harmlessly.
			_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		} else if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1); err != nil {
			return err
		}
	}
	if c.opts.ECN {
		c.sys.wantCtl = true
		if v6 {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1); err != nil {
				return err
			}
			_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
		} else if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1); err != nil {
			return err
		}
	}
	return nil
}

// readScratch is the per-call memory of a ReadBatch: the recvmmsg headers
// and what they point at. It comes from readPool and grows only when a
// call needs more. call holds the RawConn callback, bound once.
type readScratch struct {
	hs     []unix.Mmsghdr
	iovs   []unix.Iovec
	names  []udpsys.Sockaddr
	ctl    []byte
	stride int      // control bytes per header
	spill  [][]byte // GRO buffers, groBufSize each
	data   [][]byte // per header: the received bytes held in spill
	cut    []bool   // per header: more was received than data holds
	pos    []int    // readBig: first Message of each header's datagrams
	call   *udpsys.MmsgCall
	tryFn  func(fd uintptr) // ReadQueued's Control callback, bound once
	ready  bool             // tryFn found datagrams

	n int // headers filled by the last recvmmsg
	// GRO leftovers: headers [next, n) hold datagrams not yet delivered;
	// off bytes of header next are already delivered.
	next, off int
	// counted: headers [0, counted) are already in Stats.GROReads, so
	// that deliverSpill does not count a coalesced buffer whose first
	// datagrams readScatter or readBig delivered.
	counted int
}

var readPool = sync.Pool{New: func() any {
	s := &readScratch{call: udpsys.NewMmsgCall(unix.SYS_RECVMMSG)}
	s.tryFn = s.try
	return s
}}

// try is the call once, without waiting, for ReadQueued.
func (s *readScratch) try(fd uintptr) { s.ready = s.call.Fn(fd) }

// errNothingQueued: a ReadQueued found the socket empty.
var errNothingQueued = errors.New("udp: nothing queued")

// maxPooledSpill bounds the spill buffers a pooled readScratch keeps
// (4 MiB): enough for batches of 4096 Messages, while a read that had to
// hold many coalesced buffers back does not pin their memory in the pool.
const maxPooledSpill = 64

// putRead returns s to readPool.
func putRead(s *readScratch) {
	if len(s.spill) > maxPooledSpill {
		clear(s.spill[maxPooledSpill:])
		s.spill = s.spill[:maxPooledSpill]
	}
	clear(s.data)
	readPool.Put(s)
}

// recvmmsg reads into the prepared headers through the netpoller.
func (s *readScratch) recvmmsg(c *Conn) error {
	s.call.Hs = s.hs
	var err error
	if c.sys.nowait {
		// Control runs the call once: false means EAGAIN, nothing queued.
		s.ready = false
		err = c.rc.Control(s.tryFn)
		if err == nil && !s.ready {
			err = errNothingQueued
		}
	} else {
		err = c.rc.Read(s.call.Fn)
	}
	s.call.Hs = nil
	if err == errNothingQueued {
		return err
	}
	if err != nil {
		return c.opError("recvmmsg", err)
	}
	if s.call.Errno != 0 {
		return c.opError("recvmmsg", s.call.Errno)
	}
	s.n = s.call.N
	return nil
}

// prepare sizes the scratch for n headers, each with stride control bytes.
func (s *readScratch) prepare(n, stride int) {
	s.hs = udpsys.Grow(s.hs, n)
	s.iovs = udpsys.Grow(s.iovs, n)
	s.names = udpsys.Grow(s.names, n)
	s.ctl = udpsys.Grow(s.ctl, n*stride)
	s.stride = stride
	for i := range s.hs {
		h := &s.hs[i]
		h.Len = 0
		h.Hdr = unix.Msghdr{
			Name:    (*byte)(unsafe.Pointer(&s.names[i])),
			Namelen: unix.SizeofSockaddrInet6,
			Iov:     &s.iovs[i],
			Iovlen:  1,
		}
		if stride > 0 {
			h.Hdr.Control = &s.ctl[i*stride]
			h.Hdr.SetControllen(stride)
		}
	}
}

func setIov(v *unix.Iovec, b []byte) {
	v.Base = nil
	if len(b) > 0 {
		v.Base = &b[0]
	}
	v.SetLen(len(b))
}

// meta parses header i's source address and control messages into m.
func (s *readScratch) meta(i int, m *Message) udpsys.Control {
	h := &s.hs[i]
	m.Addr = udpsys.ParseSockaddr(&s.names[i])
	m.Flags = int(h.Hdr.Flags)
	var ctl udpsys.Control
	if s.stride > 0 {
		b := s.ctl[i*s.stride : i*s.stride+int(h.Hdr.Controllen)]
		ctl = udpsys.ParseControl(b)
		copyOOB(m, b)
		m.Local, m.IfIndex, m.TOS = ctl.Dst, ctl.IfIndex, ctl.TOS
	}
	return ctl
}

// ReadBatch reads up to len(msgs) datagrams into msgs[i].Buf and returns
// how many it read. It blocks (honouring the read deadline) until at least
// one is available, then takes what is waiting without blocking again.
//
// On Linux it is one recvmmsg(2). Without GRO the kernel writes each
// datagram straight into its Buf.
//
// With GRO on, the kernel may hand up to 64 datagrams of one flow as one
// buffer, which ReadBatch splits into one Message per datagram, each with
// its source address, packet info and TOS. It avoids copies where the
// buffers allow:
//   - while the flow coalesces and every Buf holds its datagram size, the
//     kernel writes each datagram straight into a Buf;
//   - while it does not, and every Buf holds 65,527 bytes (a whole
//     coalesced buffer, as wireguard-go and the relay use), each Message
//     gets its own recvmmsg header as without GRO, and a coalesced buffer
//     that does arrive is split with copies of all but its first datagram;
//   - otherwise datagrams go through internal 64 KiB buffers and are copied
//     once into Buf, which needs only the datagram's size.
//
// To keep the filled Messages first and in order without copying,
// ReadBatch may exchange Buf slices among msgs (each Message still holds
// one of the buffers passed in, its length unchanged). Datagrams that do
// not fit in msgs are kept and returned first by the next ReadBatch.
//
// A datagram larger than its Buf is reported with Truncated set. So is,
// with MSG_CTRUNC in Flags, a GRO buffer whose segment size was lost
// because its control messages did not fit, which cannot be split: only
// control messages enabled past the Conn's Options (through SyscallConn)
// can crowd it out.
func (c *Conn) ReadBatch(msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	c.readMu.Lock()
	defer c.readMu.Unlock()
	return c.readBatch(msgs)
}

// ReadQueued reads as [Conn.ReadBatch] does, but never waits: it returns
// 0 and a nil error when neither the Conn (datagrams an earlier read left
// pending) nor the socket holds a datagram. It ignores the read deadline.
// A server that stops can use it to serve what its socket still holds
// before closing it.
func (c *Conn) ReadQueued(msgs []Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	c.readMu.Lock()
	defer c.readMu.Unlock()
	c.sys.nowait = true
	n, err := c.readBatch(msgs)
	c.sys.nowait = false
	if err == errNothingQueued {
		return 0, nil
	}
	return n, err
}

func (c *Conn) readBatch(msgs []Message) (int, error) {
	if !c.sys.started {
		c.sys.started = true
		c.startGRO()
	}
	if len(c.sys.pending) > 0 {
		return c.readPending(msgs), nil
	}
	if c.groOn.Load() {
		return c.readGRO(msgs)
	}
	return c.readPlain(msgs)
}

// readPending delivers the datagrams of earlier reads that are still
// waiting, oldest first, into msgs, and returns how many it filled.
func (c *Conn) readPending(msgs []Message) int {
	p := 0
	for len(c.sys.pending) > 0 && p < len(msgs) {
		p = c.deliverSpill(c.sys.pending[0], msgs, p)
	}
	return p
}

// copyOOB copies a message's control data into m.OOB, if the caller gave
// one, and sets MSG_CTRUNC in m.Flags when it does not all fit, as
// recvmsg(2) does.
func copyOOB(m *Message, ctl []byte) {
	m.NOOB = copy(m.OOB, ctl)
	if m.OOB != nil && m.NOOB < len(ctl) {
		m.Flags |= unix.MSG_CTRUNC
	}
}

// maxStride bounds the control space per message a caller's OOB can ask
// for: more than every control message Linux sends with a datagram.
const maxStride = 4096

func (c *Conn) ctlStride(msgs []Message) int {
	stride, oob := 0, false
	if c.sys.wantCtl || c.groOn.Load() {
		stride = udpsys.RecvSpace
	}
	for i := range msgs {
		if msgs[i].OOB != nil {
			oob = true
			stride = max(stride, min(len(msgs[i].OOB), maxStride))
		}
	}
	if oob {
		stride = max(stride, udpsys.RecvSpace)
	}
	// Each message's control data starts where the kernel's alignment of
	// control messages, a word, wants it.
	const word = int(unsafe.Sizeof(uintptr(0)))
	return (stride + word - 1) &^ (word - 1)
}

func (c *Conn) readPlain(msgs []Message) (int, error) {
	s := readPool.Get().(*readScratch)
	defer putRead(s)
	s.prepare(len(msgs), c.ctlStride(msgs))
	for i := range msgs {
		setIov(&s.iovs[i], msgs[i].Buf)
	}
	if err := s.recvmmsg(c); err != nil {
		return 0, err
	}
	for i := range s.n {
		m := &msgs[i]
		m.resetRead()
		s.meta(i, m)
		m.N = int(s.hs[i].Len)
		m.Truncated = m.Flags&unix.MSG_TRUNC != 0
	}
	return s.n, nil
}

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

// lostGRO reports that header k's control messages were cut (MSG_CTRUNC)
// and ctl, parsed from them, has no UDP_GRO segment size: the buffer may
// hold several datagrams whose size is lost, so it is delivered as one
// Message marked Truncated, with MSG_CTRUNC in Flags. The control buffer
// holds all the messages the Conn's options ask for; only more of them,
// enabled through SyscallConn (timestamps go before UDP_GRO), cut it.
func (s *readScratch) lostGRO(k int, ctl udpsys.Control) bool {
	return s.hs[k].Hdr.Flags&unix.MSG_CTRUNC != 0 && ctl.GSOSize == 0 && !ctl.IPLevel
}

func (s *readScratch) ctlOf(k int) []byte {
	return s.ctl[k*s.stride : k*s.stride+int(s.hs[k].Hdr.Controllen)]
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
	// Copy what does not fit into spill buffers first: it is still in
	// msgs[k].Buf for k > last, and in the tail of msgs[last].Buf. Only
	// the headers that wait, [next, n), take a spill buffer, in order: a
	// large batch whose head coalesced needs a few, not one per header.
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
	n := s.pos[last] + lastFit
	if s.next < s.n {
		c.sys.pending = append(c.sys.pending, s)
	} else {
		putRead(s)
	}
	return n, nil
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

// writeScratch is the per-call memory of a WriteBatch. sendFn (the kernel
// hook handed to writeGroups) and call (the RawConn callback) are bound
// once when it is made.
type writeScratch struct {
	c      *Conn
	groups []group
	hs     []unix.Mmsghdr
	iovs   []unix.Iovec
	names  []udpsys.Sockaddr
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
			namelen = udpsys.PutSockaddr(&s.names[gi], c.sys.family, m.Addr)
			if namelen == 0 {
				badAddr = unix.EAFNOSUPPORT
				break
			}
		}
		for j := g.start; j < g.end; j++ {
			setIov(&s.iovs[j], msgs[j].Buf)
		}
		s.ctlOff[gi] = len(s.ctl)
		if g.seg > 0 {
			s.ctl = udpsys.AppendUDPSegment(s.ctl, uint16(g.seg))
		}
		if m.Local.IsValid() {
			s.ctl = udpsys.AppendPktinfo(s.ctl, m.Local, m.IfIndex)
		}
		if m.TOS != 0 {
			switch {
			case c.sys.family == unix.AF_INET || m.Addr.Addr().Is4() || m.Addr.Addr().Is4In6():
				s.ctl = udpsys.AppendTOS(s.ctl, m.TOS, true)
			case !m.Addr.IsValid():
				// A dual-stack socket sending to the peer it is connected
				// to, which may be IPv4 or IPv6: send both. Each path
				// skips the other's level (ip_cmsg_send keeps only SOL_IP
				// and IPV6_PKTINFO, ip6_datagram_send_ctl only SOL_IPV6).
				s.ctl = udpsys.AppendTOS(s.ctl, m.TOS, true)
				s.ctl = udpsys.AppendTOS(s.ctl, m.TOS, false)
			default:
				s.ctl = udpsys.AppendTOS(s.ctl, m.TOS, false)
			}
		}
		s.ctl = append(s.ctl, m.OOB...)
		h := &s.hs[gi]
		h.Len = 0
		h.Hdr = unix.Msghdr{Iov: &s.iovs[g.start], Namelen: namelen}
		h.Hdr.SetIovlen(g.end - g.start)
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

// WriteBatch writes the datagrams in msgs and returns how many went out,
// msgs[:n], each whole; msgs[i].N is set for those. On Linux it is one
// sendmmsg(2), which may send fewer than len(msgs) without an error: call
// it again for the rest, or use [Conn.WriteAll].
//
// With GSO on, consecutive messages to the same Addr (with the same Local
// and TOS and no OOB) whose sizes are equal, the last possibly shorter,
// go out as one UDP_SEGMENT send of at most 64 datagrams and 65,507 bytes,
// one iovec per datagram: payloads are not copied. If the kernel refuses a
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
