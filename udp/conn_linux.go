package udp

// The Linux Conn: its state and the socket options it sets up.

import (
	"math"

	"golang.org/x/sys/unix"
)

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
// falls back to the plain one, which the kernel caps there. A size past
// what the option's C int holds asks for the largest buffer: cut to 32
// bits it would be some other size, the smallest for 2 to 4 GiB.
func setBuffer(fd, force, plain, n int) error {
	n = min(n, math.MaxInt32)
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
