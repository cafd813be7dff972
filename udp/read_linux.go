package udp

// Batch reads: recvmmsg(2) through the netpoller into pooled scratch.

import (
	"errors"
	"sync"
	"unsafe"

	"github.com/zeroio/zeroio/internal/sockaddr"
	"github.com/zeroio/zeroio/internal/udpsys"
	"golang.org/x/sys/unix"
)

// readScratch is the per-call memory of a ReadBatch: the recvmmsg headers
// and what they point at. It comes from readPool and grows only when a
// call needs more. call holds the RawConn callback, bound once.
type readScratch struct {
	hs     []unix.Mmsghdr
	iovs   []unix.Iovec
	names  []sockaddr.Inet
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
	for {
		c.readMu.Lock()
		n, err := c.readBatch(msgs)
		woken := c.wokenByHandOut(err)
		c.readMu.Unlock()
		if !woken {
			return n, err
		}
		c.waitHandOut() // then read again, under the caller's deadline
	}
}

// ReadQueued reads as [Conn.ReadBatch] does, but never waits for a
// datagram: it returns 0 and a nil error when neither the Conn (datagrams
// an earlier read left pending) nor the socket holds one. It ignores the
// read deadline. Reads are serialized, so it does wait for a ReadBatch or
// read method that another goroutine has waiting on the socket: stop
// those first (a read deadline in the past wakes them). A server that
// stops can use it to serve what its socket still holds before closing
// it.
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
		// What a read left pending is the socket's: once it is closed,
		// reads fail with net.ErrClosed, as package net's do.
		if err := c.rc.Control(func(uintptr) {}); err != nil {
			return 0, c.opError("recvmmsg", err)
		}
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
