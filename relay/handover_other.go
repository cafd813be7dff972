//go:build !linux

package relay

import "net"

// enableReusePort and steer need Linux's SO_REUSEPORT groups; elsewhere a
// listen address has one socket (see reusePortSupported), and a reload
// that would share a port between two of them fails instead.
func enableReusePort(ln net.Listener) error { return reusePortSupported() }

func steer(ln net.Listener, n int) error { return reusePortSupported() }

func migrateReq() bool { return false }
