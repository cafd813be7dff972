package relay

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// errProbed ends checkUnbound's probe socket once its bind has worked.
var errProbed = errors.New("relay: bind probe done")

// checkUnbound returns the error bind(2) gives when addr (on network, a
// TCP or UDP one) is bound already, nil when it is free. A SO_REUSEPORT
// group, as a route with Workers > 1 opens, joins the sockets of another
// process of the same user at that address without a word and shares its
// clients with it (socket(7)), where a lone socket would be refused; so
// before opening one, a socket without the option binds addr and closes.
// A reload sharing the port with sockets of its own does not ask.
func checkUnbound(network, addr string) error {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" {
		return nil // an error is the listen's to report; port 0 is free
	}
	lc := net.ListenConfig{Control: bindProbe}
	var err error
	if strings.HasPrefix(network, "udp") {
		var pc net.PacketConn
		if pc, err = lc.ListenPacket(context.Background(), network, addr); err == nil {
			pc.Close()
		}
	} else {
		var ln net.Listener
		if ln, err = lc.Listen(context.Background(), network, addr); err == nil {
			ln.Close()
		}
	}
	if errors.Is(err, errProbed) {
		return nil
	}
	return err
}

// bindProbe binds the socket package net made for checkUnbound, with
// the options net set (SO_REUSEADDR for TCP, IPV6_V6ONLY), and stops net
// there: the probe never listens, so no client can reach it.
func bindProbe(network, address string, c syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return err
	}
	var sa unix.Sockaddr
	if strings.HasSuffix(network, "4") {
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().Unmap().As4()}
	} else {
		sa6 := &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
		if z := ap.Addr().Zone(); z != "" {
			if n, err := strconv.Atoi(z); err == nil {
				sa6.ZoneId = uint32(n)
			} else if ifc, err := net.InterfaceByName(z); err == nil {
				sa6.ZoneId = uint32(ifc.Index)
			}
		}
		sa = sa6
	}
	var berr error
	if err := c.Control(func(fd uintptr) { berr = unix.Bind(int(fd), sa) }); err != nil {
		return err
	}
	if berr != nil {
		return os.NewSyscallError("bind", berr)
	}
	return errProbed
}
