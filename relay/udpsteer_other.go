//go:build !linux

package relay

// controller is a socket whose options can be set (a *udp.Conn).
type controller interface {
	Control(f func(fd uintptr)) error
}

// reusePortUDP and steerUDP need Linux's SO_REUSEPORT groups; elsewhere a
// UDP route has one socket (see reusePortSupported), and a reload that
// would bind a port one of its sockets holds stops that route first.
func reusePortUDP(c controller) error { return reusePortSupported() }

func steerUDP(c controller, first, n int) error { return reusePortSupported() }

// unhashUDP is not needed where a port is never shared.
func unhashUDP(c controller) error { return reusePortSupported() }

// settleSteering has nothing to wait for where nothing is steered.
func settleSteering() {}
