//go:build !linux

package relay

import "net"

// queued returns nothing here: a stopped listener's accept queue is reset
// when it closes, as the platform does.
func queued(net.Listener) []net.Conn { return nil }
