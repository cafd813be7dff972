//go:build !linux

package relay

import "syscall"

// reusePortUDP and steerUDP need Linux's SO_REUSEPORT groups; elsewhere a
// UDP route has one socket (see reusePortSupported), and a reload that
// would bind a port one of its sockets holds stops that route first.
func reusePortUDP(c syscall.Conn) error { return reusePortSupported() }

func steerUDP(c syscall.Conn, first, n int) error { return reusePortSupported() }

// settleSteering has nothing to wait for where nothing is steered.
func settleSteering() {}
