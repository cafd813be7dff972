//go:build !linux

package relay

import "net"

// closeQueued closes ln and returns nothing here: a stopped listener's
// accept queue is reset when it closes, as the platform does.
func closeQueued(ln net.Listener) []net.Conn {
	ln.Close()
	return nil
}
