package udpsys

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Control is what ParseControl found in a received control buffer.
type Control struct {
	GSOSize int        // UDP_GRO: size of each coalesced datagram but the last; 0 if not coalesced
	Dst     netip.Addr // IP_PKTINFO / IPV6_PKTINFO: the local address the datagram was sent to
	IfIndex int        // IP_PKTINFO / IPV6_PKTINFO: the interface it arrived on
	TOS     uint8      // IP_TOS / IPV6_TCLASS
	HasTOS  bool
	// IPLevel: a SOL_IP or SOL_IPV6 message was found. udp_recvmsg puts
	// those after UDP_GRO, so UDP_GRO was not cut when one is there.
	IPLevel bool
}

// Sizes of the control messages this package builds or expects.
var (
	SpaceSegment = unix.CmsgSpace(2)                           // UDP_SEGMENT, a uint16
	SpaceGRO     = unix.CmsgSpace(4)                           // UDP_GRO, an int
	SpacePktinfo = unix.CmsgSpace(unix.SizeofInet6Pktinfo)     // the larger of the two pktinfos
	SpaceTOS     = unix.CmsgSpace(4)                           // IP_TOS / IPV6_TCLASS as an int
	RecvSpace    = SpaceGRO + 2*SpacePktinfo + 2*SpaceTOS + 16 // all a dual-stack socket may receive
)

// ParseControl walks a received control buffer. Malformed or unknown
// messages are skipped: bytes from the kernel never make it panic.
func ParseControl(b []byte) Control {
	var c Control
	for len(b) > 0 {
		h, data, rest, err := unix.ParseOneSocketControlMessage(b)
		if err != nil {
			break
		}
		b = rest
		if h.Level == unix.IPPROTO_IP || h.Level == unix.IPPROTO_IPV6 {
			c.IPLevel = true
		}
		switch {
		case h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && len(data) >= 2:
			if len(data) >= 4 {
				c.GSOSize = int(*(*int32)(unsafe.Pointer(&data[0])))
			} else {
				c.GSOSize = int(*(*uint16)(unsafe.Pointer(&data[0])))
			}
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&data[0]))
			c.Dst = netip.AddrFrom4(pi.Addr)
			c.IfIndex = int(pi.Ifindex)
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&data[0]))
			c.Dst = netip.AddrFrom16(pi.Addr).Unmap()
			c.IfIndex = int(pi.Ifindex)
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			c.TOS, c.HasTOS = data[0], true
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			c.TOS, c.HasTOS = uint8(binary.NativeEndian.Uint32(data)), true
		}
	}
	return c
}

// appendCmsg appends a control message header for datalen bytes of data and
// returns the grown buffer and the data region to fill. It grows b only if
// its capacity is short.
func appendCmsg(b []byte, level, typ int32, datalen int) ([]byte, []byte) {
	start := len(b)
	space := unix.CmsgSpace(datalen)
	b = grow(b, space)
	clear(b[start:])
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[start]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(datalen))
	off := start + unix.CmsgLen(0)
	return b, b[off : off+datalen]
}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}

// AppendUDPSegment appends a UDP_SEGMENT message: the kernel splits the
// send into datagrams of size bytes (the last may be shorter). See
// udp(7) and kernel commit bec1f6f69736 ("udp: generate gso with
// UDP_SEGMENT").
func AppendUDPSegment(b []byte, size uint16) []byte {
	b, d := appendCmsg(b, unix.SOL_UDP, unix.UDP_SEGMENT, 2)
	binary.NativeEndian.PutUint16(d, size)
	return b
}

// AppendPktinfo appends the message that makes the kernel send from src:
// IP_PKTINFO for an IPv4 source (also accepted on an AF_INET6 socket
// sending to an IPv4-mapped destination, see ip_cmsg_send), IPV6_PKTINFO
// otherwise.
func AppendPktinfo(b []byte, src netip.Addr, ifindex int) []byte {
	if src.Is4() || src.Is4In6() {
		b, d := appendCmsg(b, unix.IPPROTO_IP, unix.IP_PKTINFO, unix.SizeofInet4Pktinfo)
		pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&d[0]))
		pi.Ifindex = int32(ifindex)
		pi.Spec_dst = src.Unmap().As4()
		return b
	}
	b, d := appendCmsg(b, unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, unix.SizeofInet6Pktinfo)
	pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&d[0]))
	pi.Ifindex = uint32(ifindex)
	pi.Addr = src.As16()
	return b
}

// AppendTOS appends IP_TOS (for an IPv4 destination) or IPV6_TCLASS, as an
// int as both accept (ip(7), ipv6(7)).
func AppendTOS(b []byte, tos uint8, v4dst bool) []byte {
	level, typ := int32(unix.IPPROTO_IPV6), int32(unix.IPV6_TCLASS)
	if v4dst {
		level, typ = unix.IPPROTO_IP, unix.IP_TOS
	}
	b, d := appendCmsg(b, level, typ, 4)
	binary.NativeEndian.PutUint32(d, uint32(tos))
	return b
}
