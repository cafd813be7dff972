package udp

// Control messages: what reads ask the kernel for and hand to Messages,
// and what writes send with each datagram.

import (
	"unsafe"

	"github.com/zeroio/zeroio/internal/sockaddr"
	"github.com/zeroio/zeroio/internal/udpsys"
	"golang.org/x/sys/unix"
)

// meta parses header i's source address and control messages into m.
func (s *readScratch) meta(i int, m *Message) udpsys.Control {
	h := &s.hs[i]
	m.Addr = sockaddr.ParseInet(&s.names[i])
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

// appendControl appends to b the control messages of a send of m (and the
// messages of its group): UDP_SEGMENT when seg is not 0, the source
// address for Local, the TOS, then the caller's own OOB.
func appendControl(b []byte, family int, m *Message, seg int) []byte {
	if seg > 0 {
		b = udpsys.AppendUDPSegment(b, uint16(seg))
	}
	if m.Local.IsValid() {
		b = udpsys.AppendPktinfo(b, m.Local, m.IfIndex)
	}
	if m.TOS != 0 {
		switch {
		case family == unix.AF_INET || m.Addr.Addr().Is4() || m.Addr.Addr().Is4In6():
			b = udpsys.AppendTOS(b, m.TOS, true)
		case !m.Addr.IsValid():
			// A dual-stack socket sending to the peer it is connected
			// to, which may be IPv4 or IPv6: send both. Each path
			// skips the other's level (ip_cmsg_send keeps only SOL_IP
			// and IPV6_PKTINFO, ip6_datagram_send_ctl only SOL_IPV6).
			b = udpsys.AppendTOS(b, m.TOS, true)
			b = udpsys.AppendTOS(b, m.TOS, false)
		default:
			b = udpsys.AppendTOS(b, m.TOS, false)
		}
	}
	b = append(b, m.OOB...)
	return b
}
