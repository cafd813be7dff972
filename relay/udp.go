package relay

import (
	"errors"
	"net"
)

// udpRoute relays datagrams; filled in when package udp lands.
type udpRoute struct{}

func listenUDP(rt *route, r *Route) (*udpRoute, error) {
	return nil, errors.New("UDP relay not implemented yet")
}
func (u *udpRoute) addr() net.Addr { return nil }
func (u *udpRoute) run()           {}
func (u *udpRoute) close()         {}
