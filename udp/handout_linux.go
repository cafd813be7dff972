package udp

import (
	"golang.org/x/sys/unix"
)

// maxDrained bounds what a hand-out reads ahead of the new reader: 1024
// buffers of 64 KiB hold more than any receive buffer the kernel allows an
// unprivileged process (net.core.rmem_max), so in practice all of it.
const maxDrained = 1024

// setGRO sets UDP_GRO (Linux 5.0, kernel commit e20cf8d3f1f7) and reports
// whether it is on now. Setting it is also the probe: older kernels answer
// ENOPROTOOPT.
func (c *Conn) setGRO(on bool) bool {
	v := 0
	if on {
		v = 1
	}
	var err error
	if cerr := c.rc.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, v)
	}); cerr != nil {
		err = cerr
	}
	if err != nil {
		return !on // unchanged
	}
	return on
}

// stopGRO turns GRO off for good, c.readMu held. It first reads what the
// socket holds, splitting coalesced buffers into datagrams
// that the Conn's own reads return before anything else: once UDP_GRO is
// off the kernel no longer reports the segment size of a buffer it has
// already coalesced (udp_recvmsg in net/ipv4/udp.c emits the UDP_GRO
// message only while the option is on), so such a buffer could not be told
// from one large datagram. After the switch the kernel coalesces nothing
// more: it no longer merges the flow's packets, and splits a GSO packet
// from a local sender before queueing it (udp_unexpected_gso).
func (c *Conn) stopGRO() {
	if !c.groOn.Load() {
		return
	}
	c.drainGRO()
	c.groOn.Store(c.setGRO(false))
}

// drainGRO reads, without waiting, every buffer the socket holds into
// c.sys.pending, up to maxDrained buffers. c.readMu is held and GRO on.
func (c *Conn) drainGRO() {
	stride := c.ctlStride(nil)
	for len(c.sys.pending) < maxDrained {
		s := readPool.Get().(*readScratch)
		s.prepare(groSlots, stride)
		s.growSpill(groSlots, groSlots)
		for i := range groSlots {
			setIov(&s.iovs[i], s.spill[i])
		}
		s.call.Hs = s.hs
		done := false
		if err := c.rc.Control(func(fd uintptr) { done = s.call.Fn(fd) }); err != nil {
			done = false
		}
		s.call.Hs = nil
		if !done || s.call.Errno != 0 || s.call.N == 0 {
			putRead(s)
			return
		}
		s.n = s.call.N
		s.fillSpill()
		c.sys.pending = append(c.sys.pending, s)
	}
}
